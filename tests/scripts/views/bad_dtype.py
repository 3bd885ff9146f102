"""A float64 weight multiplied with float32 activations."""
import torch
from torch import nn


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.w = nn.Parameter(torch.randn(4, 2, dtype=torch.float64))

    def forward(self, x):
        h = self.a(x)
        return torch.mm(h, self.w)  # LINE_MM


model = Mixed


def batch(step):
    return torch.randn(2, 3), None


def loss_fn(out, y):
    return out.sum()
