"""A small ResNet-style CNN with BatchNorm on the 8x8 handwritten digits.

    stem (conv3x3-bn-relu, 16 ch)
    -> stage1: BasicBlock(16 -> 16)
    -> stage2: BasicBlock(16 -> 32, stride 2, 1x1 conv-bn shortcut)
    -> stage3: BasicBlock(32 -> 64, stride 2, 1x1 conv-bn shortcut)
    -> global average pool -> fc(10) -> cross-entropy

Images are (1, 8, 8) in [0, 1] (or (1, 28, 28) MNIST when ``$GRADVIZ_MNIST`` is set; see
``_digits.py``). ``metrics`` reports held-out accuracy.
"""
import torch
import torch.nn.functional as F
from torch import nn

import _digits

BATCH_SIZE = 64
WIDTHS = (16, 32, 64)


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn, plus the (possibly downsampling) shortcut, then relu."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
        else:
            self.shortcut = nn.Identity()
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


class DigitsResNet(nn.Module):
    def __init__(self, n_classes: int = 10, widths=WIDTHS):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, widths[0], 3, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        self.stage1 = BasicBlock(widths[0], widths[0])
        self.stage2 = BasicBlock(widths[0], widths[1], stride=2)
        self.stage3 = BasicBlock(widths[1], widths[2], stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[2], n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        return self.fc(self.pool(x).flatten(1))


model = DigitsResNet


def batch(step: int):
    return _digits.train_batch(step, BATCH_SIZE)      # images (64, 1, 8, 8), labels (64,)


def loss_fn(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output, targets)


def optimizer(params):
    return torch.optim.Adam(params, lr=3e-3)


def metrics(model: nn.Module) -> dict[str, float]:
    return {"accuracy": _digits.accuracy(model, flatten=False)}
