"""Source: pytorch/pytorch issue #41508 ("nn.MultiheadAttention causes gradients to become NaN under some use
cases"), with #40932 ("MultiheadAttention set(-inf) cause 'Nan' in loss computing": "if the whole input is
padded, it means the key_padding_mask parameter is full of True").

A batch holds a sequence that is all padding: ``key_padding_mask`` is True on its every key, the
attention softmax of its rows sees only -inf and returns NaN, and the loss is NaN. Fix (the thread's):
keep at least one key per sequence (drop empty sequences from the batch, or unmask one position).
"""
import os

import torch
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "nan", "cause": ["NaN"]}


class Encoder(nn.Module):
    def __init__(self, embed_dim=8, nhead=2):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embed_dim=embed_dim, num_heads=nhead, dropout=0.0)
        self.out = nn.Linear(embed_dim, 1)

    def forward(self, src, src_key_padding_mask):
        src, attn = self.self_attn(src, src, src, key_padding_mask=src_key_padding_mask)   # BUG
        return self.out(src).squeeze(-1)


model = Encoder


def batch(step):
    g = torch.Generator().manual_seed(step)
    src = torch.randn(5, 3, 8, generator=g)                     # (seq, batch, embed)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[1, 3:] = True
    mask[2, :] = not FIXED                                    # sequence 2 is all <pad>
    if FIXED:
        mask[2, 1:] = True
    return (src, mask), torch.randn(5, 3, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
