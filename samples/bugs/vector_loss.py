"""BUG: the loss is a vector: ``reduction='none'`` and never reduced.

``nn.CrossEntropyLoss(reduction='none')`` returns one loss per sample (shape (32,)),
and nobody takes ``.mean()``. ``loss.backward()`` then fails with "grad can be
implicitly created only for scalar outputs". Expected gradviz finding:
``loss-not-scalar``. Fix: ``criterion(output, targets).mean()`` (or the default
reduction).
"""
import torch
from torch import nn

criterion = nn.CrossEntropyLoss(reduction="none")      # <-- per-sample losses


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
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
    return criterion(output, targets)                   # never reduced
