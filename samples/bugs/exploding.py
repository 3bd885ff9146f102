"""BUG: exploding gradients in a deep ReLU stack initialised with too-large weights.

16 ``Linear -> ReLU`` layers whose weights are drawn with std ``3 / sqrt(fan_in)``
(He init would be ``sqrt(2) / sqrt(fan_in)``): every layer multiplies the signal's norm
by about 2, forward and backward, so the activations and the weight gradients grow by
about 2**16 and gradient norms exceed 1e4. Expected gradviz finding: ``exploding``.
Fix: He/Kaiming init (``nn.init.kaiming_normal_``), normalisation, gradient clipping.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

DEPTH = 16
WIDTH = 64
INIT_GAIN = 3.0          # <-- the bug: He init is sqrt(2) ~ 1.41


class DeepReLUNet(nn.Module):
    def __init__(self, depth=DEPTH, width=WIDTH):
        super().__init__()
        layers = []
        for i in range(depth):
            fc = nn.Linear(20 if i == 0 else width, width)
            nn.init.normal_(fc.weight, std=INIT_GAIN / math.sqrt(fc.in_features))
            nn.init.zeros_(fc.bias)
            layers += [fc, nn.ReLU()]
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.layers(x))


model = DeepReLUNet


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
