"""Extra broken (and healthy) model scripts for the diagnosis tests: general cases, not the samples."""
from __future__ import annotations

import textwrap
from pathlib import Path

HEADER = """
import math
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
"""

BATCH = """
def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(32, 20, generator=g), torch.randint(3, (32,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
"""

SCRIPTS = {
    # detach inside a submodule, between two of its layers
    "inner_detach": """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(20, 32)
        self.b = nn.Linear(32, 32)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h = h.detach()  # CUT
        return torch.relu(self.b(h))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.out = nn.Linear(32, 3)

    def forward(self, x):
        return self.out(self.block(x))


model = Net
""",
    # a raw Parameter that no op ever uses
    "unused_param": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)
        self.temperature = nn.Parameter(torch.ones(1))  # UNUSED

    def forward(self, x):
        return self.fc(x)


model = Net
""",
    # torch.tensor(x.tolist())
    "tolist": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(20, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        h = torch.tensor(h.tolist())  # CUT
        return self.head(h)


model = Net
""",
    # in-place += on a ReLU output that a later op saved
    "relu_iadd": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.scale = nn.Parameter(torch.ones(32))
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        y = h * self.scale  # SAVES
        h += 1.0  # INPLACE
        return self.fc2(y + h)


model = Net
""",
    # sqrt(0) in forward is finite; its backward is inf/NaN
    "sqrt_zero": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        z = self.fc(x)
        d = torch.sqrt((z - z) ** 2)  # SQRT
        return z + d


model = Net
""",
    # a custom autograd.Function whose backward returns the wrong shape
    "bad_shape": """
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g.sum(0)  # WRONG SHAPE


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(Double.apply(self.fc1(x)))


model = Net
""",
    # a custom Function with a wrong scale factor, used with an extra non-tensor argument
    "bad_scale": """
class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g, None  # FORGOT k


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(Scale.apply(self.fc1(x), 3.0))


model = Net
""",
    # the whole forward under no_grad: the loss has no graph
    "all_no_grad": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        with torch.no_grad():  # NOGRAD
            return self.fc2(torch.relu(self.fc1(x)))


model = Net
""",
    # a module runs but its output never reaches the loss
    "aux_unused": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)
        self.aux = nn.Linear(20, 5)

    def forward(self, x):
        self.last_aux = self.aux(x)  # UNUSED OUTPUT
        return self.fc(x)


model = Net
""",
    # .data on a weight
    "data_cut": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = F.linear(x, self.fc1.weight.data, self.fc1.bias)  # DATA
        return self.fc2(torch.relu(h))


model = Net
""",
    # dead units through clamp(min=0)
    "dead_clamp": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 3)
        nn.init.constant_(self.fc1.bias, -10.0)

    def forward(self, x):
        return self.fc2(self.fc1(x).clamp(min=0))  # CLAMP


model = Net
""",
    # saturated tanh
    "tanh_sat": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 3)
        nn.init.normal_(self.fc1.weight, std=3.0)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))  # TANH


model = Net
""",
    # NaN in the data
    "nan_data": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        return self.fc(x)


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    x[3, 5] = float("nan")
    return x, torch.randint(3, (32,), generator=g)
""",
    # healthy: dropout + batchnorm + tanh, must raise no alarm (gradcheck must not be fooled by dropout)
    "healthy_dropout_bn": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.bn = nn.BatchNorm1d(64)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(64, 32)
        self.fc3 = nn.Linear(32, 3)

    def forward(self, x):
        h = self.drop(torch.relu(self.bn(self.fc1(x))))
        h = F.dropout(torch.tanh(self.fc2(h)), 0.2, self.training)
        return self.fc3(h)


model = Net
""",
    # forward raises (shape mismatch)
    "shape_error": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 8)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x))  # SHAPE


model = Net
""",
    # trains into NaN with a huge learning rate
    "high_lr": """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 20, generator=g)
    return x, x.sum(1, keepdim=True) * 10


def loss_fn(output, targets):
    return F.mse_loss(output, targets)


def optimizer(params):
    return torch.optim.SGD(params, lr=0.5)
""",
}


def write(tmp_path: Path, name: str) -> Path:
    body = textwrap.dedent(SCRIPTS[name])
    text = HEADER + body
    if "def batch(" not in body:
        text += BATCH
    elif "def loss_fn(" not in body:
        text += "\n\ndef loss_fn(output, targets):\n    return F.cross_entropy(output, targets)\n"
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def line_of(path: Path, marker: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if f"# {marker}" in line:
            return i
    raise AssertionError(marker)
