"""Input attribution on models from libraries (transformers' BERT and ResNet, torch's GRU), small
configs with random weights: torch is the oracle, completeness within 1 %, and the attribution
lands where the model can look (padding gets none, a patch-only view gets it all)."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from gradviz.core.attribution.attribute import attribute
from gradviz.core.script.load import load_script

import transformers  # a test extra (pyproject.toml): required, never skipped
from tolerance import assert_close_to_magnitude

BERT = """
import torch
from transformers import BertConfig, BertForSequenceClassification

def model():
    return BertForSequenceClassification(BertConfig(
        vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=3))

def batch(step):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(1, 60, (3, 10), generator=g)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 7:] = 0                     # example 0 is padded after position 6
    return (ids, mask), torch.randint(3, (3,), generator=g)

def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out.logits, y)
"""

RESNET = """
import torch
from transformers import ResNetConfig, ResNetForImageClassification

PATCH = {patch}

class PatchOnly(torch.nn.Module):
    # a real ResNet that is shown only the PATCH rows and columns of the image (zeros elsewhere)
    def __init__(self):
        super().__init__()
        self.net = ResNetForImageClassification(ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=4, layer_type="basic"))
        mask = torch.zeros(1, 1, 16, 16)
        if PATCH:
            mask[..., 4:9, 6:12] = 1
        else:
            mask += 1
        self.register_buffer("mask", mask)

    def forward(self, x):
        return self.net(x * self.mask).logits

model = PatchOnly

def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.rand(2, 3, 16, 16, generator=g), torch.randint(4, (2,), generator=g)

def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out, y)
"""

GRU = """
import torch
from torch import nn

class LastSteps(nn.Module):
    # torch's GRU reads only the last 4 of the 9 time steps (the first 5 are cut off by the slice)
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 12, batch_first=True)
        self.head = nn.Linear(12, 2)

    def forward(self, x):
        out, _ = self.gru(x[:, 5:])
        return self.head(out[:, -1])

model = LastSteps

def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(3, 9, 5, generator=g), torch.randint(2, (3,), generator=g)

def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out, y)
"""


def _script(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return load_script(path)


def _built(script):
    torch.manual_seed(0)
    return script.new_model().eval(), *script.get_batch(0)


def test_bert_token_ids_through_the_word_embeddings(tmp_path):
    script = _script(tmp_path, "bert", BERT)
    sal = attribute(script, method="saliency", target="label")
    ids, mask = sal.inputs
    assert ids.kind == "tokens" and ids.through == "bert.embeddings.word_embeddings"
    assert ids.attribution.shape == (3, 10)
    assert mask.attribution is None and "no embedding lookup" in mask.note      # the attention mask
    # oracle: |d f / d word-embedding output| per position, f = the label's logit summed over the batch
    model, (x, m), y = _built(script)
    kept = {}
    hook = model.bert.embeddings.word_embeddings.register_forward_hook(
        lambda mod, args, out: kept.setdefault("e", out.detach().requires_grad_(True)))
    out = model(input_ids=x, attention_mask=m).logits
    hook.remove()
    model.bert.embeddings.word_embeddings.register_forward_hook(lambda mod, args, out: kept["e"])
    f = model(input_ids=x, attention_mask=m).logits.gather(1, y[:, None]).sum()
    assert float(f.detach()) == pytest.approx(float(out.gather(1, y[:, None]).sum().detach()), rel=1e-6)
    (g,) = torch.autograd.grad(f, [kept["e"]])
    assert_close_to_magnitude(ids.attribution, g.norm(dim=-1), 1e-5)
    # the padded positions of example 0 are never attended to: no attribution at all
    assert np.all(ids.attribution[0, 7:] == 0) and np.all(ids.attribution[0, :7] > 0)

    ig = attribute(script, method="ig", target="label", steps=16)
    c = ig.completeness
    assert c.ok and abs(c.attribution_sum - c.output_delta) <= 0.01 * abs(c.output_delta)
    assert np.all(ig.inputs[0].attribution[0, 7:] == 0)
    data = ig.to_json()
    assert [e["shape"] for e in data["inputs"]] == [[3, 10], [3, 10]]
    assert data["inputs"][1]["attribution"] is None and data["completeness"]["rel_error"] < 0.01


def test_resnet_image_saliency_equals_autograd_and_ig_is_complete(tmp_path):
    script = _script(tmp_path, "resnet", RESNET.format(patch=False))
    sal = attribute(script, method="saliency")
    (img,) = sal.inputs
    assert img.kind == "image" and img.attribution.shape == (2, 3, 16, 16)
    model, (x,), y = _built(script)
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(script.compute_loss(model, (x,), y), [x])
    assert_close_to_magnitude(img.attribution, g.abs(), 1e-5)
    ig = attribute(script, method="ig", steps=48)
    assert ig.completeness.ok, ig.completeness


def test_resnet_shown_one_patch_puts_the_attribution_in_the_patch(tmp_path):
    script = _script(tmp_path, "patch", RESNET.format(patch=True))
    inside = np.zeros((16, 16), dtype=bool)
    inside[4:9, 6:12] = True
    for method in ("saliency", "grad-x-input", "ig"):
        a = attribute(script, method=method, steps=32).inputs[0].attribution
        assert np.all(a[..., ~inside] == 0), method
        assert np.abs(a[..., inside]).sum() > 0, method


def test_gru_sequence_attribution_only_on_the_steps_it_reads(tmp_path):
    script = _script(tmp_path, "gru", GRU)
    ig = attribute(script, method="ig", steps=32, target="pred")
    (seq,) = ig.inputs
    assert seq.kind == "sequence" and seq.attribution.shape == (3, 9, 5)
    assert np.all(seq.attribution[:, :5] == 0) and np.all(np.abs(seq.attribution[:, 5:]).sum(-1) > 0)
    assert ig.completeness.ok
    model, (x,), y = _built(script)
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(script.compute_loss(model, (x,), y), [x])
    sal = attribute(script, method="grad-x-input").inputs[0].attribution
    assert_close_to_magnitude(sal, (x * g).detach(), 1e-5)
