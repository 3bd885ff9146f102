"""Planted bug in a real model: BERT's pooler computed but never used.

transformers' ``BertModel`` (small config, random weights) builds its pooler (a Linear + tanh
over the first token) on every forward, but this script's loss reads only
``last_hidden_state``: the pooler's parameters never get a gradient, yet the optimizer holds
them. gradviz check: ``unreachable`` for ``pooler.dense.weight`` and ``pooler.dense.bias``,
the pooler "runs in forward, but its result never reaches the loss".
"""
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = BertModel(BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=32))
        self.tags = nn.Linear(32, 5)

    def forward(self, ids):
        out = self.bert(ids)  # BUG: computes the pooler; only last_hidden_state is used below
        return self.tags(out.last_hidden_state)


model = Tagger


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randint(96, (2, 12), generator=g), torch.randint(5, (2, 12), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output.reshape(-1, 5), targets.reshape(-1))
