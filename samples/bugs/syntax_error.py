"""BUG: this script has a syntax error (a missing closing parenthesis).

gradviz cannot even import it. Expected gradviz finding: ``script-error`` (a
SyntaxError pointing at the line below).
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(32, 20, generator=g), torch.randint(3, (32,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
