"""Source: facebookresearch/fairseq issue #2389 ("LayerDrop multiple GPU command"): training with
``--encoder-layerdrop 0.2`` on 8 GPUs stops with "some parameters aren't contributing to the loss, use
--find-unused-parameters"; with it, the run works.

fairseq's ``LayerDropModuleList`` draws ``dropout_probs = torch.empty(len(self)).uniform_()`` and yields
only the layers whose draw is above ``p`` in training: a skipped layer's parameters get no gradient on
that step. Fixed version: ``p = 0`` (or DDP's find_unused_parameters=True).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "sometimes-unused", "steps": 5, "many": True, "params_prefix": ["layers."],
          "cause": ["LayerDrop", "find_unused_parameters=True"]}


class LayerDropModuleList(nn.ModuleList):
    def __init__(self, p, modules=None):
        super().__init__(modules)
        self.p = p

    def __iter__(self):
        dropout_probs = torch.empty(len(self)).uniform_()
        for i, m in enumerate(super().__iter__()):
            if not self.training or (dropout_probs[i] > self.p):
                yield m


class TransformerEncoder(nn.Module):
    def __init__(self, dim=8, n_layers=4):
        super().__init__()
        self.embed = nn.Linear(4, dim)
        self.layers = LayerDropModuleList(p=0.0 if FIXED else 0.2,
                                          modules=[nn.Linear(dim, dim) for _ in range(n_layers)])
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = x + torch.tanh(layer(x))                 # BUG
        return self.out(x)


model = TransformerEncoder


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(6, 4, generator=g), torch.randint(2, (6,), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
