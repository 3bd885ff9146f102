"""Source: sail-sg/poolformer issue #16 ("Bug on transfer poolformer to detr"): DDP stops with "Parameters
which did not receive grad for rank 0: backbone.norm0.weight, backbone.norm0.bias" -- PoolFormer's
detection backbone normalises every ``out_indices`` stage output (``norm0`` ... ``norm3``), and DETR uses
only the last feature. Fix: build the backbone with ``out_indices=(3,)`` (no unused norm layers).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "unreachable", "params": ["backbone.norm0.bias", "backbone.norm0.weight"],
          "cause": ["never reaches the loss"]}


class PoolFormerBackbone(nn.Module):
    def __init__(self, out_indices=(0, 3)):
        super().__init__()
        self.out_indices = out_indices
        self.network = nn.ModuleList([nn.Conv2d(3, 4, 3, 2, 1), nn.Conv2d(4, 4, 3, 2, 1),
                                      nn.Conv2d(4, 4, 3, 1, 1), nn.Conv2d(4, 8, 3, 1, 1)])
        for i in out_indices:
            self.add_module(f"norm{i}", nn.GroupNorm(1, self.network[i].out_channels))

    def forward(self, x):
        outs = []
        for idx, block in enumerate(self.network):
            x = torch.relu(block(x))
            if idx in self.out_indices:
                outs.append(getattr(self, f"norm{idx}")(x))      # BUG
        return outs


class DETRLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = PoolFormerBackbone(out_indices=(3,) if FIXED else (0, 3))
        self.head = nn.Linear(8, 4)

    def forward(self, img):
        feature = self.backbone(img)[-1]                # DETR uses a single feature map
        return self.head(feature.mean((2, 3)))


model = DETRLike


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 8, 8, generator=g), torch.rand(2, 4, generator=g)


def loss_fn(output, boxes):
    return F.l1_loss(output, boxes)
