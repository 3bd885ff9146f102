"""Input attribution against torch: saliency = |autograd.grad|, IG completeness, known features."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from gradviz.core.attribution.attribute import AttributionError, attribute, attribute_batch, gauss_legendre, input_kind
from gradviz.core.attribution.paths import Objective
from gradviz.core.script.load import load_script
from tolerance import assert_close_to_magnitude

SMOOTH_MLP = """
import torch
from torch import nn

def model():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))

def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(5, 6, generator=g), torch.tensor([0, 2, 1, 1, 0])

def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out, y)
"""

# the output depends on feature 3 only (squared, so IG from zeros sees it with a curve)
ONE_FEATURE = """
import torch
from torch import nn

class OnlyFeature3(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return (self.w * x[:, 3] ** 2).unsqueeze(1)

model = OnlyFeature3

def batch(step):
    return torch.arange(1.0, 11.0).reshape(2, 5), None

def loss_fn(out, y):
    return out.sum()
"""

# token ids through an embedding: only position 2 matters
TOKENS = """
import torch
from torch import nn

class Pos2(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, ids):
        e = self.emb(ids)                    # (B, T, 4)
        return torch.tanh(self.head(e[:, 2]))

model = Pos2

def batch(step):
    return torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), torch.zeros(2, 1)

def loss_fn(out, y):
    return ((out - y) ** 2).mean()
"""


def _script(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return load_script(path)


def _model_and_batch(script, seed=0):
    torch.manual_seed(seed)
    model = script.new_model().eval()
    inputs, targets = script.get_batch(0)
    return model, inputs, targets


def _torch_input_grad(script, target=None):
    """dL/dx (or d out[:, target].sum()/dx) as torch computes it."""
    model, inputs, targets = _model_and_batch(script)
    x = inputs[0].clone().requires_grad_(True)
    if target is None:
        f = script.compute_loss(model, (x,), targets)
    else:
        f = model(x)[..., target].sum()
    (g,) = torch.autograd.grad(f, [x])
    return x.detach(), g


def test_saliency_equals_autograd_grad(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    result = attribute(script, method="saliency")
    x, g = _torch_input_grad(script)
    assert result.method == "saliency" and result.completeness is None
    got = result.inputs[0].attribution
    assert got.shape == (5, 6)
    assert_close_to_magnitude(got, g.abs(), 1e-6)
    # the attributed output is the script's loss, evaluated in eval mode
    model, inputs, targets = _model_and_batch(script)
    assert result.output == pytest.approx(float(script.compute_loss(model, inputs, targets).detach()), rel=1e-6)


def test_grad_x_input_and_output_target(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    result = attribute(script, method="grad-x-input", target=2)
    x, g = _torch_input_grad(script, target=2)
    assert_close_to_magnitude(result.inputs[0].attribution, x * g, 1e-6)
    assert "output 2" in result.target


def test_integrated_gradients_completeness(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    result = attribute(script, method="ig", steps=32)
    c = result.completeness
    model, inputs, targets = _model_and_batch(script)
    f_x = float(script.compute_loss(model, inputs, targets).detach())
    f_0 = float(script.compute_loss(model, (torch.zeros_like(inputs[0]),), targets).detach())
    assert c.output_delta == pytest.approx(f_x - f_0, rel=1e-5)
    assert c.attribution_sum == pytest.approx(float(result.inputs[0].attribution.sum()), rel=1e-9)
    assert abs(c.attribution_sum - c.output_delta) <= 0.01 * abs(c.output_delta)
    assert c.ok and c.rel_error < 0.01
    assert result.passes == 34          # f(x), f(baseline) and one pass per quadrature point


def test_integrated_gradients_are_exact_for_a_linear_output(tmp_path):
    # f = sum_i w . x_i: IG from zeros is w * x exactly, for any number of steps
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    model, inputs, targets = _model_and_batch(script)
    lin = torch.nn.Linear(6, 1)

    def objective(m, xs, t):
        return lin(xs[0]).sum()

    result = attribute_batch(model, inputs, targets, objective, method="ig", steps=1)
    expected = (inputs[0] * lin.weight[0]).detach().numpy()
    assert_close_to_magnitude(result.inputs[0].attribution, expected, 1e-5)
    assert result.completeness.rel_error < 1e-5


def test_attribution_lands_on_the_one_feature_the_output_uses(tmp_path):
    script = _script(tmp_path, "one", ONE_FEATURE)
    x = torch.arange(1.0, 11.0).reshape(2, 5)
    for method in ("saliency", "grad-x-input", "ig"):
        a = attribute(script, method=method, steps=16).inputs[0].attribution
        assert np.all(a[:, [0, 1, 2, 4]] == 0), method
        assert np.all(np.abs(a[:, 3]) > 0), method
    ig = attribute(script, method="ig", steps=16)
    # f = 1.5 * x3^2 per example: IG from zeros gives all of f to feature 3
    np.testing.assert_allclose(ig.inputs[0].attribution[:, 3], 1.5 * x[:, 3].numpy() ** 2, rtol=1e-6)
    assert ig.completeness.rel_error < 1e-6


def test_token_ids_attribute_through_the_embedding(tmp_path):
    script = _script(tmp_path, "tok", TOKENS)
    ig = attribute(script, method="ig", steps=24)
    entry = ig.inputs[0]
    assert entry.kind == "tokens" and entry.through == "emb"
    assert entry.attribution.shape == (2, 4)             # one number per position
    assert np.all(entry.attribution[:, [0, 1, 3]] == 0)
    assert np.all(entry.attribution[:, 2] != 0)
    assert ig.completeness.ok
    # f(baseline) is the loss with every embedding vector zero: tanh(head(0)) = tanh(bias)
    model, inputs, targets = _model_and_batch(script)
    base_out = torch.tanh(model.head.bias).expand(2, 1)
    assert ig.baseline_output == pytest.approx(float(((base_out - targets) ** 2).mean().detach()), rel=1e-6)
    # saliency per position = |dL/de| over the embedding dimension, as torch computes it
    sal = attribute(script, method="saliency").inputs[0].attribution
    e = model.emb(inputs[0]).detach().requires_grad_(True)
    out = torch.tanh(model.head(e[:, 2]))
    (g,) = torch.autograd.grad(((out - targets) ** 2).mean(), [e])
    assert_close_to_magnitude(sal, g.norm(dim=-1), 1e-5)


def test_token_baseline_is_a_token_id(tmp_path):
    script = _script(tmp_path, "tok", TOKENS)
    ig = attribute(script, method="ig", steps=24, baseline=0)
    assert ig.baseline == "constant 0"
    model, inputs, targets = _model_and_batch(script)
    base = script.compute_loss(model, (torch.zeros_like(inputs[0]),), targets)   # all ids = token 0
    assert ig.baseline_output == pytest.approx(float(base.detach()), rel=1e-6)
    assert ig.completeness.ok


def test_transformer_sample_tokens_ig_completeness():
    from tests.conftest import SAMPLES

    ig = attribute(SAMPLES / "transformer.py", method="ig", steps=8, target="loss")
    entry = ig.inputs[0]
    assert entry.kind == "tokens" and entry.through == "tok_emb"
    assert entry.attribution.shape == (8, 32)
    assert ig.completeness.ok


def test_label_and_pred_targets(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    model, inputs, targets = _model_and_batch(script)
    out = model(inputs[0])
    label = attribute(script, method="saliency", target="label")
    assert label.output == pytest.approx(float(out.gather(1, targets[:, None]).sum()), rel=1e-6)
    pred = attribute(script, method="ig", target="pred", steps=16)
    assert pred.output == pytest.approx(float(out.max(1).values.sum()), rel=1e-6)
    assert pred.completeness.ok


def test_given_baseline_equal_to_the_input_gives_nothing(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    _, inputs, _ = _model_and_batch(script)
    ig = attribute(script, method="ig", steps=4, baseline=[inputs[0].clone()])
    assert np.all(ig.inputs[0].attribution == 0)
    assert ig.completeness.output_delta == 0 and ig.completeness.ok


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "lrp"}, "unknown method"),
    ({"target": 7}, "out of range"),
    ({"target": "best"}, "--target takes"),
    ({"steps": 0}, "--steps"),
    ({"baseline": [torch.zeros(2, 2)]}, "baseline 0 has shape"),
    ({"baseline": [torch.zeros(5, 6), torch.zeros(1)]}, "2 tensors for 1 inputs"),
])
def test_bad_options_say_why(tmp_path, kwargs, message):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    with pytest.raises(AttributionError, match=message):
        attribute(script, **kwargs)


def test_json_schema(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    data = attribute(script, method="ig", steps=8).to_json()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["method"] == "ig" and back["target"] == "loss"
    assert back["inputs"][0]["shape"] == [5, 6]
    assert np.array(back["inputs"][0]["attribution"]).shape == (5, 6)
    assert set(back["completeness"]) >= {"attribution_sum", "output_delta", "rel_error"}
    assert attribute(script, method="saliency").to_json()["completeness"] is None


def test_model_left_in_its_mode(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    model, inputs, targets = _model_and_batch(script)
    model.train()
    attribute_batch(model, inputs, targets, Objective(script), method="saliency")
    assert model.training


def test_quadrature_and_kinds():
    a, w = gauss_legendre(5)
    assert np.all((a > 0) & (a < 1)) and w.sum() == pytest.approx(1.0)
    assert float((w * a ** 7).sum()) == pytest.approx(1 / 8)        # exact up to degree 2n-1
    assert input_kind([2, 3, 8, 8], False) == "image"
    assert input_kind([2, 7, 5], False) == "sequence"
    assert input_kind([2, 5], False) == "tabular"
    assert input_kind([2, 5], True) == "tokens"


def test_progress_counts_passes_and_can_stop(tmp_path):
    script = _script(tmp_path, "mlp", SMOOTH_MLP)
    seen = []
    attribute(script, method="ig", steps=5, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(k, 7) for k in range(1, 8)]

    class Stop(Exception):
        pass

    def stop(done, total):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        attribute(script, method="ig", steps=5, progress=stop)
