"""Source: Ciela-Institute/caustics pull request #83 ("Fix nan gradients in NFW and TNFW"): "It turns out
that `torch.where` does not protect from nans in the off branch".

The NFW lens profile's ``_f`` picks ``arccosh(1/x) / sqrt(1 - x**2)`` for x < 1 and
``arccos(1/x) / sqrt(x**2 - 1)`` for x > 1 with one ``torch.where``: each branch is NaN where the other
is used, and backward turns that into NaN gradients. Fix (the PR's): evaluate each branch on inputs
masked to its own domain.
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "discarded_by": "where", "cause": ["discards", "make the discarded branch finite"]}


class NFW(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(0.0))

    def _f(self, x):
        if FIXED:
            x_lo = torch.where(x < 1, x, 0.5)
            x_hi = torch.where(x > 1, x, 2.0)
            return torch.where(x > 1, torch.arccos(1 / x_hi) / (x_hi**2 - 1) ** 0.5,
                               torch.arccosh(1 / x_lo) / (1 - x_lo**2) ** 0.5)
        return torch.where(x > 1, torch.arccos(1 / x) / (x**2 - 1) ** 0.5,
                           torch.arccosh(1 / x) / (1 - x**2) ** 0.5)     # BUG

    def forward(self, r):
        return self._f(r * torch.exp(self.log_scale))


model = NFW


def batch(step):
    return torch.tensor([0.3, 0.6, 1.5, 2.5, 4.0]), torch.zeros(5)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
