"""Planted bug in a real model: a softmax over a fully masked row, on top of transformers' BERT.

Attention pooling over BERT's token states masks the padding with ``-inf`` (intentional) and
takes a softmax over each sequence; the batch holds one sequence that is padding only, so its
row is entirely ``-inf`` and the softmax gives 0/0 = NaN. gradviz check: ``nan`` at the softmax
line (not the ``masked_fill`` line before it), naming row [1] as fully masked.
"""
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel


class PooledClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.bert = BertModel(BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=32), add_pooling_layer=False)
        self.score = nn.Linear(32, 1)
        self.out = nn.Linear(32, 3)

    def forward(self, ids):
        pad = ids == 0
        h = self.bert(ids, attention_mask=(~pad).long()).last_hidden_state
        scores = self.score(h).squeeze(-1)
        scores = scores.masked_fill(pad, float("-inf"))  # intentional: padding gets no weight
        weights = torch.softmax(scores, dim=-1)  # BUG: NaN for a row that is all padding
        return self.out((weights.unsqueeze(-1) * h).sum(1))


model = PooledClassifier


def batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, 96, (3, 10), generator=g)
    ids[1] = 0          # a sequence that is padding only
    return ids, torch.randint(3, (3,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)
