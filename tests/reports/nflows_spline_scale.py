"""Source: bayesiains/nflows issue #89 ("Inplace operation error").

PiecewiseRationalQuadraticCouplingTransform scales the spline parameters with
``unnormalized_widths /= np.sqrt(self.transform_net.hidden_features)``: the widths are a view of
the transform net's ReLU output, which ReLU saved for backward, so torch reports "output 0 of
ReluBackward0, is at version 1; expected version 0". Fix (the reporter's): divide out of place.
"""
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inplace", "op": "div_", "saved_by": "ReluBackward0", "cause": ["saved", "ReLU"]}


class TransformNet(nn.Module):
    def __init__(self, features, hidden_features, out_features):
        super().__init__()
        self.hidden_features = hidden_features
        self.inner = nn.Linear(features, hidden_features)
        self.outer = nn.Linear(hidden_features, out_features)

    def forward(self, x):
        return F.relu(self.outer(torch.tanh(self.inner(x))))


class PiecewiseRationalQuadraticCoupling(nn.Module):
    def __init__(self, features=4, num_bins=5):
        super().__init__()
        self.num_bins = num_bins
        self.transform_net = TransformNet(features // 2, 16, (features // 2) * (3 * num_bins - 1))

    def forward(self, inputs):
        identity, transform = inputs.chunk(2, dim=1)
        params = self.transform_net(identity).view(inputs.shape[0], -1, 3 * self.num_bins - 1)
        unnormalized_widths = params[..., :self.num_bins]
        unnormalized_heights = params[..., self.num_bins:2 * self.num_bins]
        if FIXED:
            unnormalized_widths = unnormalized_widths / np.sqrt(self.transform_net.hidden_features)
            unnormalized_heights = unnormalized_heights / np.sqrt(self.transform_net.hidden_features)
        else:
            unnormalized_widths /= np.sqrt(self.transform_net.hidden_features)   # BUG
            unnormalized_heights /= np.sqrt(self.transform_net.hidden_features)
        widths = F.softmax(unnormalized_widths, dim=-1)
        heights = F.softmax(unnormalized_heights, dim=-1)
        return torch.cat([identity, (transform.unsqueeze(-1) * widths * heights).sum(-1)], dim=1)


model = PiecewiseRationalQuadraticCoupling


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)


def loss_fn(output, target):
    return F.mse_loss(output, target)
