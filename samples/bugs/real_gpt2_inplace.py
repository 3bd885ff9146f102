"""Planted bug in a real model: an in-place op on a tensor GPT-2's attention saved for backward.

transformers' GPT-2 (small config, random weights) runs its attention through an attention
function registered by this script (transformers' AttentionInterface). The function scales the
attention weights in place *after* softmax produced them; softmax saved its output to compute
its gradient, so backward fails with "modified by an inplace operation".
gradviz check: ``inplace`` at the ``mul_`` line, naming softmax as the op whose saved output changed.
"""
import torch
from transformers import AttentionInterface, GPT2Config, GPT2LMHeadModel


def sharpened_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = torch.matmul(query, key.transpose(-1, -2)) * (scaling or query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = torch.softmax(scores, dim=-1)
    weights.mul_(1.5)  # BUG: in place on softmax's output, which softmax saved for backward
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


AttentionInterface.register("sharpened", sharpened_attention)


def model():
    config = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    config._attn_implementation = "sharpened"
    return GPT2LMHeadModel(config)


def batch(step):
    ids = torch.randint(96, (2, 12), generator=torch.Generator().manual_seed(step))
    return ids, ids


def compute_loss(model, inputs, targets):
    return model(inputs[0], labels=targets).loss


def loss_fn(output, targets):  # the contract's name; compute_loss is what runs
    raise NotImplementedError
