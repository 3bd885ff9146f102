"""The smallest gradviz model script the hostile-input tests and the sweep feed to the CLI:
three layers, a seeded batch and a loss (one text, so the cases differ only in what they break)."""

TINY = '''\
import torch
from torch import nn
model = lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
def loss_fn(out, y):
    return nn.functional.cross_entropy(out, y)
'''
