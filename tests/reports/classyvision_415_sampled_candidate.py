"""Source: facebookresearch/ClassyVision pull request #415 ("expose argument find_unused_parameters in
init_distributed_data_parallel_model()"): "For architecture search, we will add multiple candidate modules
at each layer position. At architecture search stage, we may only sample one of them for forward/backward
pass. DDP will complain not all module parameters are used".

Each step samples one candidate per position: the others get no gradient on that step. The check must
name them and the steps (``--steps 5``). Fixed version: every candidate contributes (a weighted sum, as
DARTS does), so all get a gradient on every step.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "sometimes-unused", "steps": 5, "many": True, "params_prefix": ["candidates."],
          "cause": ["find_unused_parameters=True"]}


class SearchCell(nn.Module):
    def __init__(self, dim=6):
        super().__init__()
        self.candidates = nn.ModuleList([nn.Linear(dim, dim), nn.Sequential(nn.Linear(dim, dim), nn.Tanh()),
                                         nn.Linear(dim, dim, bias=False)])
        self.alpha = nn.Parameter(torch.zeros(3))
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        if FIXED:
            w = torch.softmax(self.alpha, 0)
            x = sum(w[i] * op(x) for i, op in enumerate(self.candidates))
        else:
            choice = int(torch.randint(len(self.candidates), ()))
            x = self.candidates[choice](x) * torch.softmax(self.alpha, 0)[choice]      # BUG
        return self.head(x)


model = SearchCell


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, generator=g), torch.randint(2, (8,), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
