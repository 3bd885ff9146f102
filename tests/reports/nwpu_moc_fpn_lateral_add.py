"""Source: lyongo/NWPU-MOC issue #4 ("gradient computation problems").

The FPN head builds ``laterals`` with conv + ReLU and merges top-down with
``laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode='nearest')``: the ``+=`` writes
into a ReLU output ReLU saved, so torch reports "output 0 of ReluBackward0 ... is at version 1;
expected version 0". The reporter tried ``inplace=False`` on the ReLUs ("that does not help"); the
fix from the thread: "Change += into =" (``laterals[i - 1] = laterals[i - 1] + ...``).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inplace", "saved_by": "ReluBackward0", "cause": ["saved", "relu"]}


class FPNHead(nn.Module):
    def __init__(self, in_channels=(4, 8, 16), channels=8):
        super().__init__()
        self.lateral_convs = nn.ModuleList(nn.Conv2d(c, channels, 1) for c in in_channels)
        self.act = nn.ReLU(inplace=False)
        self.out = nn.Conv2d(channels, 1, 3, padding=1)

    def forward(self, inputs):
        laterals = [self.act(conv(inputs[i])) for i, conv in enumerate(self.lateral_convs)]
        for i in range(len(laterals) - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            if FIXED:
                laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode='nearest')
            else:
                laterals[i - 1] += F.interpolate(laterals[i], size=prev_shape, mode='nearest')   # BUG
        return self.out(laterals[0])


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList([nn.Conv2d(3, 4, 3, 2, 1), nn.Conv2d(4, 8, 3, 2, 1), nn.Conv2d(8, 16, 3, 2, 1)])
        self.head = FPNHead()

    def forward(self, x):
        feats = []
        for stage in self.stages:
            x = torch.relu(stage(x))
            feats.append(x)
        return self.head(feats)


model = Backbone


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 16, 16, generator=g), torch.rand(2, 1, 8, 8, generator=g)


def loss_fn(output, density):
    return F.mse_loss(output, density)
