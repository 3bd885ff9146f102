"""BUG: a submodule is defined but never called in ``forward``.

``self.norm`` was added in ``__init__`` but ``forward`` forgot to apply it, so its
parameters are not in the graph (``grad is None``) while the optimizer still holds
them. Expected gradviz finding: ``unreachable`` (for ``norm.*``). Fix: call it
(``h = self.norm(self.fc1(x))``) or delete it.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.norm = nn.LayerNorm(32)            # <-- never used
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
