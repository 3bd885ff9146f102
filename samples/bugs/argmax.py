"""BUG: a non-differentiable ``argmax`` feeds the next layer.

A "hard" quantiser: ``encoder`` scores 16 codes, ``argmax`` picks one and ``codebook``
(an Embedding) looks it up. ``argmax`` returns integer indices without gradient, so
nothing flows back into ``encoder`` (its parameters keep ``grad is None``); only
``codebook`` and ``decoder`` learn. Expected gradviz finding: ``unreachable`` (for
``encoder.*``). Fix: a straight-through or Gumbel-softmax estimator, or soft attention
over the codebook (``softmax(scores) @ codebook.weight``).
"""
import torch
import torch.nn.functional as F
from torch import nn


class HardCodeNet(nn.Module):
    def __init__(self, n_codes=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, n_codes))
        self.codebook = nn.Embedding(n_codes, 32)
        self.decoder = nn.Linear(32, 3)

    def forward(self, x):
        code = self.encoder(x).argmax(dim=-1)    # <-- integer indices: no gradient
        return self.decoder(self.codebook(code))


model = HardCodeNet


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
