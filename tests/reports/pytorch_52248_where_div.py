"""Source: pytorch/pytorch issue #52248 ("torch.where leads to unexpected gradients").

``torch.where(b, a/0, c)``: the division by zero in the branch ``where`` throws away is inf, and
``torch.autograd.grad`` returns NaN ("the not-used branch computes gradient 0/0"). Here the divisor is
a count that can be 0 (a mean over an empty group). Fix: divide by ``torch.where(b, count, 1.0)``.
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "op": "div", "discarded_by": "where", "cause": ["discards"]}


class GroupMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x, member):
        total = (self.fc(x).unsqueeze(-1) * member).sum(0)       # [features, groups]
        count = member.sum(0)
        b = count > 0
        if FIXED:
            return torch.where(b, torch.div(total, torch.where(b, count, 1.0)), torch.zeros(()))
        return torch.where(b, torch.div(total, count), torch.zeros(()))     # BUG


model = GroupMean


def batch(step):
    g = torch.Generator().manual_seed(step)
    member = torch.zeros(6, 1, 3)
    member[:, 0, 0] = 1.0
    member[:3, 0, 1] = 1.0                                       # group 2 is empty
    return (torch.randn(6, 3, generator=g), member), torch.randn(3, 3, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
