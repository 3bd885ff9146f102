"""Source: huggingface/transformers issue #17116 ("Pretrain on Wav2vec2 getting parameters did not receive grad
for rank0"), with speechbrain/speechbrain issue #2340 ("unused parameters when using WavLM. cased crash when
using DDP": "w2v2 from HF is using a layer dropout strategy").

Wav2Vec2's encoder skips each layer with probability ``config.layerdrop`` in training
(modeling_wav2vec2.py: ``skip_the_layer = dropout_probability < self.config.layerdrop``): on those
steps the layer's parameters get no gradient, and DistributedDataParallel stops with "Parameters which
did not receive grad for rank 0: wav2vec2.encoder.layers.16...". One step looks healthy; over 5 steps
gradviz must name the layers and the steps. Fixed version: ``layerdrop=0.0`` (or DDP's
find_unused_parameters=True, which a single-process check cannot show).
"""
import os

import torch
from torch import nn
from transformers import Wav2Vec2Config, Wav2Vec2Model

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "sometimes-unused", "steps": 5, "many": True, "params_prefix": ["wav2vec2.encoder.layers."],
          "cause": ["LayerDrop", "find_unused_parameters=True", "did not receive grad"]}


class Wav2Vec2ForPretrainingLike(nn.Module):
    def __init__(self):
        super().__init__()
        config = Wav2Vec2Config(
            hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32,
            conv_dim=(8, 8), conv_kernel=(4, 4), conv_stride=(2, 2), num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            feat_proj_dropout=0.0, mask_time_prob=0.0, layerdrop=0.0 if FIXED else 0.1)
        self.wav2vec2 = Wav2Vec2Model(config).train()
        self.project = nn.Linear(16, 4)

    def forward(self, input_values):
        hidden = self.wav2vec2(input_values).last_hidden_state      # BUG
        return self.project(hidden).mean(1)


model = Wav2Vec2ForPretrainingLike


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 64, generator=g), torch.randn(2, 4, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
