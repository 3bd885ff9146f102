"""The model checks a value in Python and raises after computing its first layer."""
import torch
from torch import nn


class Checked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        if h.shape[1] != 4:
            raise ValueError(f"expected 4 features, got {h.shape[1]}")  # LINE_RAISE
        return h


model = Checked


def batch(step):
    return torch.randn(2, 3), None


def loss_fn(out, y):
    return out.sum()
