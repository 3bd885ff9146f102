"""Source: pytorch/pytorch issue #1339 ("Backprop through argmax"): "I need to pass input through one
nn.Module, then argmax the output, and then pass that output to a second nn.Module. I want to backprop
through the argmax back to the weights of the first module" -- ``y_p = torch.max(y_p, 1)[1]``; the first
module's ``param.grad`` is None. apaszke: "argmax is not differentiable". Fix: hand the second module
the probabilities (``torch.softmax(y_p, 1)``; or a straight-through / Gumbel-softmax estimate).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "unreachable", "params": ["first_model.bias", "first_model.weight"], "cause": ["max"]}


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.first_model = nn.Linear(6, 4)
        self.second_model = nn.Linear(4, 2)

    def forward(self, x):
        y_p = self.first_model(x)
        if FIXED:
            return self.second_model(torch.softmax(y_p, 1))
        y_p = torch.max(y_p, 1)[1]                        # BUG
        return self.second_model(F.one_hot(y_p, 4).float())


model = TwoStage


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, generator=g), torch.randint(2, (8,), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
