"""Source: LZGMatrix/BOP19_CDPN_2019ICCV issue #4 ("A question about training"): "RuntimeError: element 0 of
tensors does not require grad and does not have a grad_fn"; the maintainer: "torch.argmax() is
nondifferentiable, so you need to take the loss before torch.argmax()".

The coordinate head predicts bins per axis; the reporter decodes them with ``torch.argmax`` and puts the
loss on the decoded coordinates. Fix: the loss on the bin logits (cross-entropy against the target bins).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "unreachable", "many": True, "also": ["loss-not-tensor"], "cause": ["argmax"]}
BINS = 8


class CoorHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Conv2d(3, 8, 3, padding=1)
        self.coor_x = nn.Conv2d(8, BINS, 1)
        self.coor_y = nn.Conv2d(8, BINS, 1)

    def forward(self, img):
        f = torch.relu(self.backbone(img))
        return self.coor_x(f), self.coor_y(f)


model = CoorHead


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 4, 4, generator=g), torch.randint(BINS, (2, 2, 4, 4), generator=g)


def loss_fn(outputs, target_bins):
    output_coor_x_, output_coor_y_ = outputs
    if FIXED:
        return F.cross_entropy(output_coor_x_, target_bins[:, 0]) + F.cross_entropy(output_coor_y_, target_bins[:, 1])
    output_coor_ = torch.stack([torch.argmax(output_coor_x_, axis=1), torch.argmax(output_coor_y_, axis=1)], axis=1)  # BUG
    output_coor_ = 2.0 * output_coor_.float() / (BINS - 1.0) - 1.0
    target = 2.0 * target_bins.float() / (BINS - 1.0) - 1.0
    return F.l1_loss(output_coor_, target)
