"""BUG: a dead ReLU layer: its pre-activations are negative for every input.

``hidden``'s bias was initialised to -5 ("to make activations sparse"), while
its weighted inputs ``W @ h`` only have a std of about 0.25, so every unit's
pre-activation is negative and ``hidden_act`` outputs 0 for the whole batch. The ReLU
passes no gradient: ``hidden`` (and ``inp``) get all-zero gradients, and ``out``
sees only zeros. Expected gradviz finding: ``dead-relu`` (for ``hidden_act``).
Fix: initialise the bias to 0 (or a small positive value).
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(20, 64)
        self.inp_act = nn.ReLU()
        self.hidden = nn.Linear(64, 64)
        self.hidden_act = nn.ReLU()
        self.out = nn.Linear(64, 3)
        nn.init.constant_(self.hidden.bias, -5.0)           # <-- the bug

    def forward(self, x):
        return self.out(self.hidden_act(self.hidden(self.inp_act(self.inp(x)))))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
