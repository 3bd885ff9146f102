"""Source: pytorch/pytorch issue #108618 ("Backward bypassing for torch.where").

``y1 = torch.where(x1 > 2, torch.log2(x1), 2*x1)`` with an element 0: ``log2(0) = -inf`` in the branch
``where`` discards, and the gradient of that element is NaN. Fix: ``torch.log2(torch.where(x1 > 2, x1, 1.0))``.
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "op": "log2", "discarded_by": "where", "cause": ["discards"]}


class Piecewise(nn.Module):
    def __init__(self):
        super().__init__()
        self.x1 = nn.Parameter(torch.tensor([0.0, 2.0, 3.0]))

    def forward(self, _):
        x1 = self.x1
        if FIXED:
            return torch.where(x1 > 2, torch.log2(torch.where(x1 > 2, x1, 1.0)), 2 * x1)
        return torch.where(x1 > 2, torch.log2(x1), 2 * x1)     # BUG


model = Piecewise


def batch(step):
    return torch.zeros(1), torch.zeros(3)


def loss_fn(output, target):
    return output.sum()
