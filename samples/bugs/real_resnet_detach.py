"""Planted bug in a real model: a ``.detach()`` between two stages of transformers' ResNet.

The script runs the ResNet's stem and stages itself (as feature-extraction code often does)
and detaches the features between stage 0 and stage 1, "to save memory". No gradient reaches
the stem or stage 0: they never train. gradviz check: ``unreachable`` for ``resnet.embedder.*``
and ``resnet.encoder.stages.0.*`` at the ``detach`` line, broken between those modules.
"""
import torch
import torch.nn.functional as F
from transformers import ResNetConfig, ResNetForImageClassification


def model():
    return ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                     num_labels=3, layer_type="basic"))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(2, 3, 32, 32, generator=g), torch.randint(3, (2,), generator=g)


def compute_loss(model, inputs, targets):
    net = model.resnet
    h = net.embedder(inputs[0])
    h = net.encoder.stages[0](h)
    h = h.detach()  # BUG: cuts the stem and stage 0 off from the loss
    h = net.encoder.stages[1](h)
    logits = model.classifier(net.pooler(h))
    return F.cross_entropy(logits, targets)


def loss_fn(output, targets):  # the contract's name; compute_loss is what runs
    return F.cross_entropy(output.logits, targets)
