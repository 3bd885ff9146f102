"""BUG: the script does not define ``batch`` (it calls its data function ``get_batch``).

gradviz needs ``model``, ``batch`` and ``loss_fn``; this script imports fine but has no
``batch``. Expected gradviz finding: ``script-error`` (missing required name ``batch``).
Fix: rename ``get_batch`` to ``batch``.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


model = Net


def get_batch(step):                             # <-- should be named ``batch``
    g = torch.Generator().manual_seed(step)
    return torch.randn(32, 20, generator=g), torch.randint(3, (32,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
