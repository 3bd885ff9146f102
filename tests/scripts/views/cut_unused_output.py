"""An auxiliary head runs in forward but its result never reaches the loss."""
import torch
from torch import nn


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.main = nn.Linear(8, 2)
        self.aux = nn.Sequential(nn.Linear(8, 4), nn.ReLU())

    def forward(self, x):
        h = torch.tanh(self.body(x))
        self.last_aux = self.aux(h)      # computed, never used
        return self.main(h)


model = TwoHeads


def batch(step):
    return torch.randn(3, 6), None


def loss_fn(out, y):
    return out.sum()
