"""Planted bug in a real model: ``log(0)`` after a softmax in transformers' ConvNeXt.

The loss is written by hand as ``-log(softmax(logits / T))`` with a small temperature: the
softmax rounds the unlikely classes to exactly 0 and ``log(0) = -inf``. gradviz check: ``inf``
at the ``torch.log`` line, the first op whose output is inf while its inputs were finite.
Fix: ``F.cross_entropy(logits / T, targets)`` (log-softmax, no log of a rounded 0).
"""
import torch
import torch.nn.functional as F
from transformers import ConvNextConfig, ConvNextForImageClassification

TEMPERATURE = 1e-4


def model():
    return ConvNextForImageClassification(ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16],
                                                         depths=[1, 1], num_labels=3))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 32, 32, generator=g), torch.randint(3, (2,), generator=g)


def loss_fn(output, targets):
    probs = torch.softmax(output.logits / TEMPERATURE, dim=-1)
    logp = torch.log(probs)  # BUG: log of probabilities rounded to exactly 0
    return F.nll_loss(logp, targets)
