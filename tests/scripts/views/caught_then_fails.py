"""The forward tries a shape, catches the error, then fails for real in a later call."""
import torch
from torch import nn


class Fallback(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        try:
            h = h @ torch.ones(5, 5)     # wrong shape, caught
        except RuntimeError:
            pass
        return h.view(7)  # LINE_VIEW


model = Fallback


def batch(step):
    return torch.randn(2, 3), None


def loss_fn(out, y):
    return out.sum()
