"""Source: sniklaus/softmax-splatting issue #50 ("RuntimeError: one of the variables needed for gradient
computation has been modified by an inplace operation"): the reporter fixed it by saving clones,
``self.save_for_backward(tenIn.clone(), tenFlow.clone())``.

A custom ``autograd.Function`` saves its inputs; the caller then scales the flow in place for the next
use (``tenFlow *= 0.5``), changing what the Function saved. Fix: clone before the write (or write out of
place: ``tenFlow = tenFlow * 0.5``).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inplace", "op": "mul_", "cause": ["saved", "clone", "Splat.apply"]}


class Splat(torch.autograd.Function):
    @staticmethod
    def forward(self, tenIn, tenFlow):
        self.save_for_backward(tenIn, tenFlow)
        return tenIn * tenFlow

    @staticmethod
    def backward(self, grad):
        tenIn, tenFlow = self.saved_tensors
        return grad * tenFlow, grad * tenIn


class Interpolator(nn.Module):
    def __init__(self):
        super().__init__()
        self.flow_net = nn.Linear(4, 4)
        self.in_net = nn.Linear(4, 4)

    def forward(self, x):
        tenIn, tenFlow = self.in_net(x), self.flow_net(x)
        out = Splat.apply(tenIn, tenFlow)
        if FIXED:
            tenFlow = tenFlow * 0.5
        else:
            tenFlow *= 0.5                                   # BUG
        return out + Splat.apply(tenIn, tenFlow)


model = Interpolator


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)


def loss_fn(output, target):
    return F.mse_loss(output, target)
