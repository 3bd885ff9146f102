"""BUG: an in-place op overwrites a tensor that autograd saved for backward.

``sigmoid`` saves its output to compute its gradient; ``gate.mul_(2)`` then modifies
that very tensor in place. The forward pass works, but ``loss.backward()`` raises
"RuntimeError: one of the variables needed for gradient computation has been modified
by an inplace operation". Expected gradviz finding: ``inplace``. Fix: ``gate = gate * 2``.
"""
import torch
import torch.nn.functional as F
from torch import nn


class GatedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.gate_proj = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        gate = torch.sigmoid(self.gate_proj(x))
        gate.mul_(2)                           # <-- in place on sigmoid's saved output
        return self.fc2(torch.relu(self.fc1(x)) * gate)


model = GatedNet


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
