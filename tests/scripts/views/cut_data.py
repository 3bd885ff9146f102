"""``.data`` inside forward: the weight's value is used, its gradient is not."""
import torch
from torch import nn


class DataUse(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        s = self.scale.data  # LINE_DATA
        return self.fc(x * s)


model = DataUse


def batch(step):
    return torch.randn(3, 4), None


def loss_fn(out, y):
    return out.pow(2).mean()
