"""BUG: a custom ``autograd.Function`` with a wrong ``backward``.

``Square`` computes ``x ** 2`` but its ``backward`` returns ``grad * x``, forgetting
the factor 2 of d(x^2)/dx = 2x. Training still "works", with gradients for everything
below ``Square`` half as large as they should be. ``torch.autograd.gradcheck`` on
``Square.apply`` (float64) fails. Expected gradviz finding: ``gradcheck-mismatch``.
Fix: ``return grad_output * 2 * x``.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Square(torch.autograd.Function):
    """Element-wise x**2 with a hand-written (wrong) backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x                 # <-- should be grad_output * 2 * x


class SquareActivation(nn.Module):
    def forward(self, x):
        return Square.apply(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.act1 = SquareActivation()
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc2(self.act1(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    y = torch.randint(3, (32,), generator=g)
    return x, y


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
