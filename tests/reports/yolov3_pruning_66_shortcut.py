"""Source: tanluren/yolov3-channel-and-layer-pruning issue #66 ("one of the variables needed for gradient
computation has been modified by an inplace operation: [8, 1024, 13, 13], which is output 0 of
CudnnBatchNormBackward").

Darknet blocks are conv + BatchNorm + ``LeakyReLU(0.1, inplace=True)``; the shortcut layer then adds
the earlier output in place (``x += layer_outputs[...]``). The leaky ReLU saved its (in-place) result,
so the shortcut's write is the one that breaks backward; the in-place ReLU that ran before the save
is harmless. Fix (models.py#L127 of the thread): ``x = x + layer_outputs[...]``.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inplace", "op": "add_", "cause": ["saved", "leaky_relu"]}


def conv_bn_leaky(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out),
                         nn.LeakyReLU(0.1, inplace=True))


class Darknet(nn.Module):
    def __init__(self):
        super().__init__()
        self.module_list = nn.ModuleList([conv_bn_leaky(3, 8), conv_bn_leaky(8, 8), conv_bn_leaky(8, 8)])
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, x):
        layer_outputs = []
        for i, module in enumerate(self.module_list):
            x = module(x)
            if i == 2:                                   # shortcut from layer -2
                if FIXED:
                    x = x + layer_outputs[-2]
                else:
                    x += layer_outputs[-2]               # BUG
            layer_outputs.append(x)
        return self.head(x)


model = Darknet


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 8, 8, generator=g), torch.randn(2, 5, 8, 8, generator=g)


def loss_fn(output, target):
    return F.mse_loss(output, target)
