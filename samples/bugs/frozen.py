"""Not a bug: a frozen, "pretrained" feature extractor (fine-tuning only the head).

``features`` is frozen with ``requires_grad_(False)``; everything else is healthy and
trains. gradviz should report only the informational finding ``frozen`` (for
``features.*``), no warnings or errors.
"""
import torch
import torch.nn.functional as F
from torch import nn


class FineTuneNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.features.requires_grad_(False)       # frozen on purpose
        self.head = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x):
        return self.head(self.features(x))


model = FineTuneNet


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)


def optimizer(params):
    return torch.optim.SGD([p for p in params if p.requires_grad], lr=0.01, momentum=0.9)
