"""BUG: the script fails at import: it needs a helper module that is not there.

``my_lab_utils`` lived next to the original script and was not copied along, so the
import raises ``ModuleNotFoundError``. Expected gradviz finding: ``script-error``.
"""
import torch
import torch.nn.functional as F
from torch import nn

from my_lab_utils.layers import ResidualGate     # <-- no such module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.gate = ResidualGate(32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.gate(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(32, 20, generator=g), torch.randint(3, (32,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
