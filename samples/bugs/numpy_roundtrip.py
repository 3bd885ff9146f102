"""BUG: a round trip through numpy between two modules cuts the graph.

``forward`` converts the backbone's output to a numpy array (say, for a numpy-based
normalisation) and back with ``torch.tensor(...)``. The new tensor has no history, so
``backbone``'s parameters get no gradient (``grad is None``). Expected gradviz
finding: ``unreachable`` (for ``backbone.*``). Fix: do the normalisation with torch ops.
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(20, 32), nn.Tanh())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        h = self.backbone(x)
        h_np = h.detach().cpu().numpy()                          # <-- leaves autograd
        h_np = (h_np - h_np.mean(axis=0)) / (h_np.std(axis=0) + 1e-5)
        h = torch.tensor(h_np, dtype=h.dtype, device=h.device)   # a new leaf, no history
        return self.head(h)


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
