"""Source: pytorch/pytorch issue #68425 ("`torch.where` produces nan in backward pass for differentiable
forward pass").

``torch.where(a <= 0, torch.exp(a), 1 + a)`` with a large ``a``: exp overflows to inf in the discarded
branch, backward computes 0 * inf = NaN. Fix: ``torch.exp(torch.where(a <= 0, a, 0.0))``.
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "op": "exp", "discarded_by": "where", "cause": ["discards", "0 × inf"]}


class SoftPlusLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(100.0))

    def forward(self, x):
        a = self.scale * x
        if FIXED:
            return torch.where(a <= 0, torch.exp(torch.where(a <= 0, a, 0.0)), 1 + a)
        return torch.where(a <= 0, torch.exp(a), 1 + a)     # BUG


model = SoftPlusLike


def batch(step):
    return torch.tensor([1.0, -0.5, 2.0]), torch.zeros(3)


def loss_fn(output, target):
    return (output - target).sum()
