"""BUG: ``log(softmax(x))`` underflows: the loss is ``inf`` and gradients are NaN.

The inputs are raw 12-bit sensor readings 0..4095 (never normalised), so the logits
span hundreds of units. ``softmax`` then rounds the small probabilities to exactly 0 in float32,
``log(0) = -inf``, the loss becomes ``inf`` and backward produces NaN gradients.
Expected gradviz findings: ``inf`` (loss) / ``nan`` (gradients). Fix: use
``F.cross_entropy`` (or ``log_softmax``), which is stable, and scale the inputs (e.g. to [0, 1]).
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    readings = torch.randint(0, 4096, (32, 64), generator=g).float()   # raw ADC counts
    labels = torch.randint(10, (32,), generator=g)
    return readings, labels


def loss_fn(output, targets):
    log_probs = torch.log(torch.softmax(output, dim=-1))      # <-- underflows to -inf
    return F.nll_loss(log_probs, targets)
