"""Source: facebookresearch/fairseq issue #251 ("Problem About Changing the encoder_out").

The reporter changes the encoder output column by column, ``encoder_out[0][:,:,j] =
do_something(encoder_out[0][:,:,j])``, and backward raises "one of the variables needed for gradient
computation has been modified by an inplace operation": the encoder's last op (tanh) saved that
output. The maintainer's fix: "You should copy the variable and modify it" (clone first).
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "inplace", "op": "__setitem__", "saved_by": "TanhBackward0", "cause": ["saved", "tanh", "clone"]}


class Encoder(nn.Module):
    def __init__(self, vocab=20, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, tokens):
        x = torch.tanh(self.proj(self.embed(tokens)))
        return (x, tokens.eq(0))


def do_something(column):
    return column * 0.5


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = nn.Linear(8, 20)

    def forward(self, tokens):
        encoder_out = self.encoder(tokens)
        if FIXED:
            encoder_out = (encoder_out[0].clone(), encoder_out[1])
        for j in range(2):
            encoder_out[0][:, :, j] = do_something(encoder_out[0][:, :, j])   # BUG
        return self.decoder(encoder_out[0]).transpose(1, 2)


model = Seq2Seq


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randint(1, 20, (3, 5), generator=g), torch.randint(20, (3, 5), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
