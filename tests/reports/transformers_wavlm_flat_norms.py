"""Source: speechbrain/speechbrain issue #2340 ("unused parameters when using WavLM"), the WavLM encoder the
report fine-tunes, here healthy (layerdrop 0).

WavLM's attention gates its relative-position bias with ``gru_rel_pos_linear`` and ``gru_rel_pos_const``;
at initialisation their gradients are tiny (4e-7) while the per-layer gradient norms of the encoder are
flat (0.02 from the projection to the head; the feature encoder frozen, as fine-tuning recipes do).
That is not "shrinking layer by layer toward the input": gradviz said ``vanishing`` on this healthy model
(a false alarm the issue reports); the check must be clean.
"""
import torch
from torch import nn
from transformers import WavLMConfig, WavLMModel

EXPECT = {"code": None}


class WavLMRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        config = WavLMConfig(
            hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
            conv_dim=(8, 8), conv_kernel=(4, 4), conv_stride=(2, 2), num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2, num_buckets=8, max_bucket_distance=16, layerdrop=0.0,
            hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
            mask_time_prob=0.0)
        self.wavlm = WavLMModel(config).train()
        self.wavlm.freeze_feature_encoder()          # as speech fine-tuning recipes do
        self.head = nn.Linear(16, 1)

    def forward(self, input_values):
        return self.head(self.wavlm(input_values).last_hidden_state.mean(1)).squeeze(-1)


model = WavLMRegressor


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 64, generator=g), torch.randn(2, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
