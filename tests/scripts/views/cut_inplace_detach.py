"""``h.detach_()``: the encoder's output is detached in place; the head then uses the same tensor."""
import torch
from torch import nn


class InPlaceDetach(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.encoder(x)
        h.detach_()  # LINE_CUT
        return self.head(h)


model = InPlaceDetach


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g), torch.randint(2, (4,), generator=g)


def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out, y)
