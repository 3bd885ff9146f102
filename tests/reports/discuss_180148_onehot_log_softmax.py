"""Source: discuss.pytorch.org thread "Calculate loss between a target in one-hot encoded with class
probabilities" (t/180148): "when a probability saturates at 0.0, the log() ... will give you inf for your
loss"; use ``log_softmax``.

The loss multiplies the one-hot target by ``torch.log(torch.softmax(logits))``. With logits that span a
few hundred units the softmax rounds the small probabilities to 0, ``log(0) = -inf``, and the target's 0
times -inf is NaN. The op to fix is the ``log`` (where -inf is born), not the ``mul`` where it turns NaN.
Fix: ``F.log_softmax(logits, dim=1)``.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inf", "op": "log", "cause": ["log(0)", "log_softmax"]}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 4)

    def forward(self, x):
        return self.fc(x) * 100.0


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(6, 5, generator=g) * 3
    return x, F.one_hot(torch.randint(4, (6,), generator=g), 4).float()


def loss_fn(logits, target):
    if FIXED:
        return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
    return -(target * torch.log(torch.softmax(logits, dim=1))).sum(1).mean()     # BUG
