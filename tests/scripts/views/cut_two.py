"""Two cuts in one forward: a detach after the encoder, a no_grad block around the adapter."""
import torch
from torch import nn


class TwoCuts(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(5, 6), nn.Tanh())
        self.adapter = nn.Linear(5, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        e = self.encoder(x).detach()  # LINE_DETACH
        with torch.no_grad():  # LINE_NO_GRAD
            a = self.adapter(x)
            a = a * 2
        return self.head(e + a)


model = TwoCuts


def batch(step):
    return torch.randn(3, 5), None


def loss_fn(out, y):
    return out.sum()
