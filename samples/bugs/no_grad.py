"""BUG: part of ``forward`` runs under ``torch.no_grad()``.

The embedding step was wrapped in ``with torch.no_grad():`` (copied from evaluation
code), so ``embed`` is outside the autograd graph and its parameters get no gradient.
Expected gradviz finding: ``unreachable`` (for ``embed.*``). Fix: remove the
``no_grad`` block (use it only around evaluation).
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(20, 32), nn.GELU())
        self.body = nn.Sequential(nn.Linear(32, 32), nn.GELU())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        with torch.no_grad():                  # <-- the bug
            h = self.embed(x)
        return self.head(self.body(h))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
