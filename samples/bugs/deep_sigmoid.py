"""BUG: vanishing gradients in a deep stack of sigmoid layers.

20 ``Linear -> Sigmoid`` layers. The sigmoid's derivative is at most 0.25, so each layer
shrinks the backward signal several-fold; the first layer's gradient is ~1e-16 times
the last layer's, and the first layers effectively never train. Expected gradviz finding:
``vanishing``. Fix: ReLU/GELU activations, residual connections, normalisation, or a
shallower net.
"""
import torch
import torch.nn.functional as F
from torch import nn

DEPTH = 20
WIDTH = 32


class DeepSigmoidNet(nn.Module):
    def __init__(self, depth=DEPTH, width=WIDTH):
        super().__init__()
        layers = []
        for i in range(depth):
            layers += [nn.Linear(20 if i == 0 else width, width), nn.Sigmoid()]
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        return self.head(self.layers(x))


model = DeepSigmoidNet


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
