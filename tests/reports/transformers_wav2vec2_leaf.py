"""Source: huggingface/transformers issue #17909 ("Wav2vec model further training [RuntimeError: you can only
change requires_grad flags of leaf variables]").

Wav2Vec2FeatureEncoder.forward does ``hidden_states = input_values[:, None]`` and, in training,
``hidden_states.requires_grad = True``: that raises when the waveform itself requires grad (then
``hidden_states`` is not a leaf). The reporter's model is healthy when the waveform is a plain batch
tensor, as it is here: a check must run it as given (no finding, exit 0) and not reject it for a
change of gradviz's own (the old probe made every float input require grad: exit 2).
"""
import torch
from torch import nn
from transformers import Wav2Vec2Config, Wav2Vec2Model

EXPECT = {"code": None}


class SpeechRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.configuration = Wav2Vec2Config(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            conv_dim=(8, 8), conv_kernel=(4, 4), conv_stride=(2, 2), num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=2, layerdrop=0.0, hidden_dropout=0.0, attention_dropout=0.0,
            activation_dropout=0.0, feat_proj_dropout=0.0, mask_time_prob=0.0)
        self.wav2vec_feature = Wav2Vec2Model(self.configuration)
        self.wav2vec_feature = self.wav2vec_feature.train()
        self.head = nn.Linear(16, 1)

    def forward(self, input_values):
        return self.head(self.wav2vec_feature(input_values).last_hidden_state.mean(1)).squeeze(-1)


model = SpeechRegressor


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 64, generator=g), torch.randn(2, generator=g)


def loss_fn(output, target):
    return ((output - target) ** 2).mean()
