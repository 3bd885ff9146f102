"""Source: allenai/allennlp issue #5682 ("Training a transformer classifier with DDP"): a Roberta/BERT
embedder loaded with its pooler, while the classifier reads the token embeddings before the pooler: "it
fails when I try to use DDP - I get errors about unused parameters not contributing to the loss ... it
seems to be related to the pooler". Fix: ``add_pooling_layer=False``.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "unreachable", "params": ["embedder.pooler.dense.bias", "embedder.pooler.dense.weight"]}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        config = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        self.embedder = BertModel(config, add_pooling_layer=FIXED is False)
        self.classifier = nn.Linear(16, 2)

    def forward(self, input_ids):
        tokens = self.embedder(input_ids).last_hidden_state      # BUG
        return self.classifier(tokens[:, 0])


model = Classifier


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randint(30, (3, 6), generator=g), torch.randint(2, (3,), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
