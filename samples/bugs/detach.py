"""BUG: a ``.detach()`` inside ``forward`` cuts the encoder off from the loss.

``Classifier.forward`` detaches the encoder's features "to save memory", so no gradient
ever reaches ``encoder``: its parameters keep ``grad is None`` and never train; only
``head`` learns. Expected gradviz finding: ``unreachable`` (for ``encoder.*``).
Fix: ``return self.head(features)``.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        features = self.encoder(x)
        return self.head(features.detach())      # <-- the bug


model = Classifier


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
