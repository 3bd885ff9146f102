"""BUG: a sigmoid layer saturated by a N(0, 1) weight init with many inputs.

``fc1`` (256 inputs) is initialised with ``nn.init.normal_(std=1.0)``: its
pre-activations have a std of about 16, so most ``sigmoid`` outputs sit at 0 or 1,
where its derivative is ~0, and very little gradient reaches ``fc1``. Expected gradviz
finding: ``saturated-sigmoid`` (for ``act1``). Fix: the default (or Xavier) init,
std about 1/sqrt(fan_in).
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 64)
        self.act1 = nn.Sigmoid()
        self.fc2 = nn.Linear(64, 3)
        nn.init.normal_(self.fc1.weight, mean=0.0, std=1.0)   # <-- the bug

    def forward(self, x):
        return self.fc2(self.act1(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 256, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
