"""Source: adambielski/siamese-triplet issue #18 ("Siamese loss problem"): "the derivatives suddenly equaled
to nan ... some of the distances equal to 0 ... the derivative sqrt(d) to d is nan. I added a small
smooth constant"; the maintainer: "Added the epsilon".

ContrastiveLoss (losses.py): ``distances = (output2 - output1).pow(2).sum(1)`` and
``F.relu(self.margin - distances.sqrt())``: a pair of identical samples has distance 0, and the
derivative of sqrt at 0 is infinite. Fix: ``(distances + self.eps).sqrt()``.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inf", "cause": ["sqrt", "epsilon"]}


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(6, 8), nn.PReLU(), nn.Linear(8, 2))

    def forward(self, x):
        return self.fc(x)


class SiameseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_net = EmbeddingNet()

    def forward(self, x1, x2):
        return self.embedding_net(x1), self.embedding_net(x2)


class ContrastiveLoss(nn.Module):
    def __init__(self, margin=1.0):
        super().__init__()
        self.margin = margin
        self.eps = 1e-9

    def forward(self, output1, output2, target):
        distances = (output2 - output1).pow(2).sum(1)
        if FIXED:
            far = F.relu(self.margin - (distances + self.eps).sqrt()).pow(2)
        else:
            far = F.relu(self.margin - distances.sqrt()).pow(2)     # BUG
        losses = 0.5 * (target.float() * distances + (1 + -1 * target).float() * far)
        return losses.mean()


model = SiameseNet
criterion = ContrastiveLoss()


def batch(step):
    g = torch.Generator().manual_seed(step)
    x1 = torch.randn(4, 6, generator=g)
    x2 = torch.randn(4, 6, generator=g)
    x2[0] = x1[0]                                     # two identical samples: distance 0
    return (x1, x2), torch.tensor([0, 1, 0, 1])


def loss_fn(outputs, target):
    return criterion(*outputs, target)
