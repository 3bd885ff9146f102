"""Llama 3 70B (transformers' ``LlamaForCausalLM``) as a model script, for structure-only tracing.

Its weights alone need ~280 GB, so gradviz traces it on the meta device (``--meta``, or
offered automatically when it would not fit): the full training graph with shapes,
module paths, source lines and memory estimates, in seconds and well under 1 GB.

    gradviz samples/llama_70b.py --meta
    gradviz export samples/llama_70b.py --meta --collapse auto -o llama70b.svg

No download: the configuration is written out below, the weights stay random (and
on the meta device, never allocated). ``GRADVIZ_LLAMA_LAYERS`` overrides the depth.
"""
import os

import torch
import torch.nn.functional as F

LAYERS = int(os.environ.get("GRADVIZ_LLAMA_LAYERS", 80))
SEQ_LEN = 128
VOCAB = 128_256


def config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=8192, intermediate_size=28672, num_hidden_layers=LAYERS,
                       num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
                       rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)


def model():
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(config())


def batch(step):
    g = torch.Generator().manual_seed(int(step))
    ids = torch.randint(VOCAB, (1, SEQ_LEN + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def compute_loss(model, inputs, targets):
    logits = model(input_ids=inputs[0]).logits
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def loss_fn(output, targets):
    return F.cross_entropy(output.logits.flatten(0, 1), targets.flatten())
