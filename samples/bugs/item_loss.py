"""BUG: ``loss_fn`` returns a Python float (``.item()``), not a tensor.

Calling ``.item()`` (meant for logging) inside the loss function throws the graph away:
there is nothing to call ``backward()`` on. Expected gradviz finding:
``loss-not-tensor``. Fix: return the tensor; call ``.item()`` only when logging.
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


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets).item()      # <-- the bug
