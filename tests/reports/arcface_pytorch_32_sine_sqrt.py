"""Source: ronghuaiyang/arcface-pytorch issue #32 ("loss nan"), fixed there with
``sine = torch.sqrt(torch.clamp((1.0 - torch.pow(cosine, 2)), 1e-9, 1))``; MccreeZhao/FR-Loss-on-Mnist
issue #2 explains when: the input and a class weight point the same way (an easy data set, fitted).

ArcMarginProduct computes ``sine = torch.sqrt(1.0 - torch.pow(cosine, 2))``. In float32 the cosine of two
aligned vectors can round to 1.0000002: ``1 - cos**2`` is negative, sqrt is NaN, and so is the loss.
Here a feature is aligned with class 0's weight (7-dimensional: its cosine rounds above 1).
"""
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "op": "sqrt", "cause": ["sqrt"]}


class ArcMarginProduct(nn.Module):
    def __init__(self, in_features=7, out_features=3, s=30.0, m=0.50):
        super().__init__()
        self.s, self.m = s, m
        self.weight = nn.Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)
        with torch.no_grad():
            self.weight[0] = 1.0                       # class 0 centre, aligned with the batch below
        self.cos_m, self.sin_m = math.cos(m), math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def forward(self, input, label):
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        if FIXED:
            sine = torch.sqrt(torch.clamp((1.0 - torch.pow(cosine, 2)), 1e-9, 1))
        else:
            sine = torch.sqrt(1.0 - torch.pow(cosine, 2))        # BUG
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where((cosine - self.th) > 0, phi, cosine - self.mm)
        one_hot = torch.zeros(cosine.size())
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        return output * self.s


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.metric_fc = ArcMarginProduct()

    def forward(self, feature, label):
        return self.metric_fc(feature, label)


model = Net


def batch(step):
    label = torch.tensor([0, 1, 2, 0])
    feature = torch.ones(4, 7)
    feature[1:3] = torch.randn(2, 7, generator=torch.Generator().manual_seed(step))
    return (feature, label), label


def loss_fn(output, label):
    return F.cross_entropy(output, label)
