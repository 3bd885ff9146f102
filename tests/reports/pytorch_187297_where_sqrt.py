"""Source: pytorch/pytorch issue #187297 ("torch.where backward propagates NaN gradient from inactive sqrt
branch").

``torch.where(xt > 0, torch.sqrt(xt), xt)``: for negative ``xt`` the sqrt branch is NaN and discarded,
yet backward multiplies its gradient (0) by sqrt's derivative (NaN): the gradients are NaN although the
loss is finite. Here ``xt`` is a layer's output, as in a model. Fix: make the discarded branch finite,
``torch.sqrt(torch.where(xt > 0, xt, 1.0))``.
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "op": "sqrt", "discarded_by": "where", "cause": ["discards", "make the discarded branch finite"]}


class SqrtGate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        xt = self.fc(x)
        if FIXED:
            return torch.where(xt > 0, torch.sqrt(torch.where(xt > 0, xt, 1.0)), xt)
        return torch.where(xt > 0, torch.sqrt(xt), xt)     # BUG


model = SqrtGate


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
