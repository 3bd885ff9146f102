"""Seed 002's training toggles: per-layer adaptive gradient clipping and label smoothing.

The oracles are written here independently of gradviz: adaptive clipping as the NFNets paper
(and timm's ``adaptive_clip_grad``) state it, one parameter (or one output row) at a time with
Python floats; label smoothing as torch's own ``F.cross_entropy(label_smoothing=...)`` and the
closed form of its gradient.
"""
from __future__ import annotations

import json
import math
from contextlib import nullcontext
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradviz
from gradviz.core.stats.adaptive_clip import AdaptiveClip, adaptive_clip_
from gradviz.core.train.label_smoothing import LabelSmoothing
from gradviz.core.script.load import ScriptError, load_script
from gradviz.core.stats.steps import StepStats, step_columns
from gradviz.core.train.trainer import TrainConfig, Trainer

from conftest import ROOT, SAMPLES
from tolerance import assert_close_to_magnitude


def reference_agc(model: nn.Module, factor: float, eps: float, unitwise: bool) -> None:
    """G <- G * min(1, factor * max(||W||, eps) / ||G||), per parameter or per output row."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is None:
                continue
            units = [(p.grad[i], p[i]) for i in range(p.shape[0])] if unitwise and p.dim() > 1 else [(p.grad, p)]
            for g, w in units:
                g_norm = math.sqrt(float((g.double() ** 2).sum()))
                limit = factor * max(math.sqrt(float((w.double() ** 2).sum())), eps)
                if g_norm >= limit:
                    g.mul_(limit / max(g_norm, 1e-6))


def _model_with_grads(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    nn.init.zeros_(m[2].bias)                       # a zero bias: its limit is factor * eps
    m(torch.randn(8, 6)).pow(2).sum().mul(30).backward()
    return m


@pytest.mark.parametrize("path", ["host", "torch"])
@pytest.mark.parametrize("granularity", ["parameter", "unit"])
@pytest.mark.parametrize("factor", [0.01, 0.1, 1e6])
def test_adaptive_clip_equals_the_reference(granularity, factor, path, monkeypatch):
    """Both ways of clipping: numpy on views of CPU float tensors, torch for any other tensor."""
    from gradviz.core.stats import adaptive_clip

    if path == "torch":
        monkeypatch.setattr(adaptive_clip, "_host_viewable", lambda g, w: False)
    ours, ref = _model_with_grads(), _model_with_grads()
    before = [p.grad.clone() for p in ours.parameters()]
    norms = adaptive_clip_(list(ours.parameters()), factor, 1e-3, granularity)
    reference_agc(ref, factor, 1e-3, granularity == "unit")
    for p, q, b in zip(ours.parameters(), ref.parameters(), before):
        assert_close_to_magnitude(p.grad, q.grad, 1e-5)
    for n, q in zip(norms, ref.parameters()):
        assert float(n) == pytest.approx(q.grad.norm().item(), rel=1e-5)
    changed = [not torch.equal(p.grad, b) for p, b in zip(ours.parameters(), before)]
    assert any(changed) == (factor < 1e6)             # a huge lambda leaves every gradient alone


@pytest.mark.parametrize("path", ["host", "torch"])
def test_unitwise_clip_of_a_convolution_is_per_output_channel(path, monkeypatch):
    """NFNets' unit-wise ratio on a conv weight (O, I, kH, kW): one norm per output channel."""
    from gradviz.core.stats import adaptive_clip

    if path == "torch":
        monkeypatch.setattr(adaptive_clip, "_host_viewable", lambda g, w: False)
    def conv(seed):
        torch.manual_seed(seed)
        m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh(), nn.Conv2d(4, 2, 1))
        m(torch.randn(2, 3, 6, 6)).pow(2).sum().mul(50).backward()
        return m
    ours, ref = conv(1), conv(1)
    adaptive_clip_(list(ours.parameters()), 0.02, 1e-3, "unit")
    reference_agc(ref, 0.02, 1e-3, True)
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert_close_to_magnitude(p.grad, q.grad, 1e-5)
    w, g = ours[0].weight, ours[0].weight.grad
    ratios = g.flatten(1).norm(dim=1) / w.flatten(1).norm(dim=1).clamp(min=1e-3)
    assert (ratios <= 0.02 * (1 + 1e-5)).all()


@pytest.mark.parametrize("path", ["host", "torch"])
def test_adaptive_clip_keeps_a_nan_gradient_non_finite(path, monkeypatch):
    """A NaN gradient is not hidden by clipping (it stays NaN, the step's statistics count it);
    the other gradients are clipped as usual."""
    from gradviz.core.stats import adaptive_clip

    if path == "torch":
        monkeypatch.setattr(adaptive_clip, "_host_viewable", lambda g, w: False)
    ours, ref = _model_with_grads(), _model_with_grads()
    ours[0].weight.grad[0, 0] = float("nan")
    stats = StepStats(ours.named_parameters(), strategy="host")
    stats.begin()
    stats.grads_ready(adaptive=AdaptiveClip(0.01))
    row = stats.finish(1.0)
    assert torch.isnan(ours[0].weight.grad).all() and row.nonfinite == 1
    assert np.isnan(row.param_norms_clipped[0]) and np.isnan(row.grad_norm_clipped)
    reference_agc(ref, 0.01, 1e-3, False)
    for p, q in list(zip(ours.parameters(), ref.parameters()))[1:]:
        assert_close_to_magnitude(p.grad, q.grad, 1e-5)


def test_adaptive_clip_keeps_none_and_refuses_bad_settings():
    m = _model_with_grads()
    m[0].weight.grad = None
    assert len(adaptive_clip_(list(m.parameters()), 0.01)) == 3
    assert m[0].weight.grad is None
    for bad in ({"factor": 0.0}, {"factor": 0.1, "eps": -1.0}, {"factor": 0.1, "granularity": "row"}):
        with pytest.raises(ValueError):
            AdaptiveClip(**bad)
    emb = nn.Embedding(10, 4, sparse=True)
    emb(torch.tensor([1, 2, 2])).sum().backward()
    with pytest.raises(ScriptError, match="sparse"):
        adaptive_clip_(list(emb.parameters()), 0.01)


@pytest.mark.parametrize("path", ["host", "torch"])
@pytest.mark.parametrize("strategy", ["host", "device"])
@pytest.mark.parametrize("max_norm", [None, 0.05])
def test_step_stats_rows_show_the_clipped_norms(strategy, max_norm, path, monkeypatch):
    """Pre-clip norms stay what backward gave; post-clip norms are those of the gradients the
    optimizer gets (adaptive clip, then clip_grad_norm_ of what it left)."""
    from gradviz.core.stats import adaptive_clip

    if path == "torch":
        monkeypatch.setattr(adaptive_clip, "_host_viewable", lambda g, w: False)
    ours, ref = _model_with_grads(), _model_with_grads()
    pre = [p.grad.norm().item() for p in ref.parameters()]
    reference_agc(ref, 0.02, 1e-3, False)
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    stats = StepStats(ours.named_parameters(), strategy=strategy)
    stats.begin()
    stats.grads_ready(max_norm, adaptive=AdaptiveClip(0.02))
    row = stats.finish(1.0)
    post = [q.grad.norm().item() for q in ref.parameters()]
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert_close_to_magnitude(p.grad, q.grad, 1e-5)
    assert row.param_norms == pytest.approx(pre, rel=1e-5)
    assert row.param_norms_clipped == pytest.approx(post, rel=1e-5)
    assert row.grad_norm == pytest.approx(math.sqrt(sum(v * v for v in pre)), rel=1e-5)
    assert row.grad_norm_clipped == pytest.approx(math.sqrt(sum(v * v for v in post)), rel=1e-5)
    # rows with and without adaptive clipping converted together (the worker's batches)
    plain = _model_with_grads()
    other = StepStats(plain.named_parameters(), strategy=strategy)
    other.begin()
    other.grads_ready(0.05)
    cols = step_columns([row.numbers, other.numbers()])
    assert cols["param_norms_clipped"][0] == pytest.approx(post, rel=1e-5)
    coef = min(1.0, 0.05 / (cols["grad_norm"][1] + 1e-6))
    assert cols["param_norms_clipped"][1] == pytest.approx(cols["param_norms"][1] * coef, rel=1e-6)


TOGGLES = '''
import torch
from torch import nn
import torch.nn.functional as F

def model():
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 5))

def batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(12, 4, generator=g), {targets}

{loss}

def optimizer(params):
    return torch.optim.SGD(params, lr=0.0)
'''
INDEX = "torch.randint(5, (12,), generator=g)"
PROBS = "torch.softmax(torch.randn(12, 5, generator=g), 1)"
LOSSES = {
    "functional": "def loss_fn(out, y):\n    return F.cross_entropy(out, y)",
    "module": "loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1., 2., 1., .5, 1.]), ignore_index=3)",
    "positional": "def loss_fn(out, y):\n    return F.cross_entropy(out, y, None, None, -100, None, 'mean', 0.3)",
    "nll": "def loss_fn(out, y):\n    return F.nll_loss(F.log_softmax(out, 1), y)",
    "combined": "def loss_fn(out, y):\n    return F.cross_entropy(out, y) + 0.01 * out.pow(2).mean()",
}


def toggles(tmp_path, loss="functional", targets=INDEX):
    path = tmp_path / f"toggles_{loss}.py"
    path.write_text(TOGGLES.format(loss=LOSSES[loss], targets=targets))
    return load_script(path)


def _smoothed_reference(script, trainer, epsilon):
    """The loss and gradients of torch's own label-smoothed cross-entropy, same weights and batch."""
    ref = script.new_model()
    ref.load_state_dict(trainer.model.state_dict())
    (x,), y = script.get_batch(0)
    fn = script.module.loss_fn
    kw = {"weight": fn.weight, "ignore_index": fn.ignore_index} if isinstance(fn, nn.Module) else {}
    loss = F.cross_entropy(ref(x), y, label_smoothing=epsilon, **kw)
    loss.backward()
    return loss.item(), [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("loss,targets", [("functional", INDEX), ("module", INDEX), ("positional", INDEX),
                                          ("functional", PROBS)])
def test_label_smoothing_is_torchs_cross_entropy(tmp_path, loss, targets):
    script = toggles(tmp_path, loss, targets)
    tr = Trainer(script, TrainConfig(device="cpu", seed=0, node_sample_interval_s=None, label_smoothing=0.2))
    want_loss, want_grads = _smoothed_reference(script, tr, 0.2)
    row = tr.step()
    assert row.loss == pytest.approx(want_loss, rel=1e-6)
    for p, g in zip(tr.model.parameters(), want_grads):
        torch.testing.assert_close(p.grad, g)
    plain = Trainer(script, TrainConfig(device="cpu", seed=0, node_sample_interval_s=None)).step()
    assert plain.loss != pytest.approx(row.loss, rel=1e-3)      # the toggle did something


def test_label_smoothing_lowers_the_gradient_at_the_logits(tmp_path):
    """Seed 002 section 2.3: the gradient at the logits is softmax - q; its norm drops."""
    script = toggles(tmp_path)
    norms = {}
    for eps in (0.0, 0.1):
        tr = Trainer(script, TrainConfig(device="cpu", seed=0, node_sample_interval_s=None, label_smoothing=eps))
        (x,), y = script.get_batch(0)
        out = tr.model(x).detach().requires_grad_(True)
        with LabelSmoothing(eps) if eps else nullcontext():
            loss = script.module.loss_fn(out, y)
        loss.backward()
        q = F.one_hot(y, 5).float() * (1 - eps) + eps / 5
        torch.testing.assert_close(out.grad, (torch.softmax(out, 1) - q) / len(y))
        norms[eps] = out.grad.norm().item()
    assert norms[0.1] < norms[0.0]


def test_label_smoothing_without_cross_entropy_is_refused(tmp_path):
    tr = Trainer(toggles(tmp_path, "nll"), TrainConfig(device="cpu", node_sample_interval_s=None,
                                                       label_smoothing=0.1))
    with pytest.raises(ScriptError) as err:
        tr.step()
    assert err.value.code == "label-smoothing-unsupported" and err.value.step == 0
    assert err.value.path.endswith("toggles_nll.py") and "cross_entropy" in str(err.value)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError):
            Trainer(toggles(tmp_path), TrainConfig(device="cpu", label_smoothing=bad))


def test_label_smoothed_node_norms_keep_the_trace_ids():
    """The smoothed loss has more nodes than the script's; sampled norms keep the trace's ids
    and are the smoothed gradient's: nll_loss gets 1 - eps, log_softmax -q/N (closed form),
    the input the gradient torch computes."""
    eps = 0.1
    script = load_script(SAMPLES / "mlp_digits.py")
    graph = gradviz.trace(script, step=0, seed=0)
    tr = Trainer(script, TrainConfig(device="cpu", node_sample_every=1, seed=0, label_smoothing=eps))
    ref = script.new_model()
    ref.load_state_dict(tr.model.state_dict())
    norms = tr.step().node_norms
    assert set(norms) == set(graph.nodes)
    assert graph.nodes["op:0"]["label"] == "nll_loss" and graph.nodes["op:1"]["label"] == "log_softmax"
    assert norms["op:0"] == pytest.approx(1 - eps, rel=1e-6)
    (x,), y = script.get_batch(0)
    n, c = len(y), 10
    assert norms["op:1"] == pytest.approx(math.sqrt(n * ((1 - eps + eps / c) ** 2 + (c - 1) * (eps / c) ** 2)) / n,
                                          rel=1e-5)
    x = x.clone().requires_grad_(True)
    F.cross_entropy(ref(x), y, label_smoothing=eps).backward()
    assert norms["input:0"] == pytest.approx(x.grad.norm().item(), rel=1e-5)


def test_label_smoothed_combined_loss_trains_without_node_norms(tmp_path):
    script = toggles(tmp_path, "combined")
    tr = Trainer(script, TrainConfig(device="cpu", node_sample_every=1, seed=0, label_smoothing=0.1))
    row = tr.step()
    assert row.node_norms is None and math.isfinite(row.loss)
    prob = Trainer(toggles(tmp_path, "combined", PROBS),
                   TrainConfig(device="cpu", node_sample_every=1, seed=0, label_smoothing=0.1))
    assert prob.step().node_norms is not None       # probability targets: the script's graph


def test_trainer_adaptive_clip_gives_the_optimizer_the_reference_gradients(tmp_path):
    script = toggles(tmp_path)
    for granularity in ("parameter", "unit"):
        tr = Trainer(script, TrainConfig(device="cpu", seed=0, node_sample_interval_s=None, adaptive_clip=0.05,
                                         adaptive_clip_granularity=granularity, max_grad_norm=0.2))
        ref = script.new_model()
        ref.load_state_dict(tr.model.state_dict())
        (x,), y = script.get_batch(0)
        F.cross_entropy(ref(x), y).backward()
        pre = [p.grad.norm().item() for p in ref.parameters()]
        reference_agc(ref, 0.05, 1e-3, granularity == "unit")
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.2)
        row = tr.step()                                   # lr 0: p.grad is what the optimizer got
        for p, q in zip(tr.model.parameters(), ref.parameters()):
            assert_close_to_magnitude(p.grad, q.grad, 1e-5)
        assert row.param_norms == pytest.approx(pre, rel=1e-5)
        assert row.param_norms_clipped == pytest.approx([q.grad.norm().item() for q in ref.parameters()], rel=1e-5)
        assert (row.param_norms_clipped < row.param_norms).any()
    with pytest.raises(ValueError):
        Trainer(script, TrainConfig(device="cpu", adaptive_clip=-1.0))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gradviz", "train", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_cli_train_flags(tmp_path):
    sample = str(SAMPLES / "mlp_digits.py")
    base = ("--steps", "4", "--every", "2", "--json", "--device", "cpu")
    plain = [json.loads(line) for line in _cli(sample, *base).stdout.splitlines()]
    r = _cli(sample, *base, "--agc", "0.01", "--agc-granularity", "unit", "--label-smoothing", "0.1")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    first = lines[0]
    assert first["clipped_params"] >= 1 and first["grad_norm_clipped"] < first["grad_norm"]
    assert first["loss"] != pytest.approx(plain[0]["loss"], rel=1e-3)
    assert lines[-1]["summary"] and lines[-1]["adaptive_clip"] == {"factor": 0.01, "eps": 1e-3,
                                                                  "granularity": "unit"}
    assert lines[-1]["label_smoothing"] == 0.1
    assert "clipped_params" in plain[0] and plain[0]["clipped_params"] == 0
    bad = _cli(sample, *base, "--agc", "-1")
    assert bad.returncode == 2 and "--agc must be a positive number" in bad.stderr and "'-1'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    nll = tmp_path / "nll.py"
    nll.write_text(TOGGLES.format(loss=LOSSES["nll"], targets=INDEX))
    r = _cli(str(nll), "--steps", "2", "--label-smoothing", "0.1")
    assert r.returncode == 2 and "nll.py:" in r.stderr and "cross-entropy" in r.stderr
    text = _cli(sample, "--steps", "2", "--every", "1", "--device", "cpu", "--agc", "0.01")
    assert text.returncode == 0 and "clipped" in text.stdout


def test_rows_to_columns_carry_the_clipped_norms(tmp_path):
    from gradviz.app.training.worker import rows_to_columns

    tr = Trainer(toggles(tmp_path), TrainConfig(device="cpu", seed=0, node_sample_interval_s=None,
                                               adaptive_clip=0.05))
    rows = [tr.step() for _ in range(3)]
    cols = rows_to_columns(rows)
    for i, r in enumerate(rows):
        assert np.array_equal(cols["param_norms_clipped"][i], r.param_norms_clipped.astype(np.float32))


HF_SCRIPT = '''
import torch
from transformers import BertConfig, BertForSequenceClassification

def model():
    return BertForSequenceClassification(BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=32,
                                                    max_position_embeddings=16, num_labels=4))

def batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randint(60, (6, 10), generator=g), torch.randint(4, (6,), generator=g)

def loss_fn(out, y):
    raise AssertionError("compute_loss is used")

def compute_loss(model, inputs, targets):
    return model(*inputs, labels=targets).loss       # transformers' own loss, inside forward

def optimizer(params):
    return torch.optim.SGD(params, lr=0.0)
'''


def test_toggles_on_a_transformers_model(tmp_path):
    """A library's model computing its loss inside forward (BertForSequenceClassification's
    CrossEntropyLoss): the smoothed loss and the clipped gradients equal the reference."""
    path = tmp_path / "bert_cls.py"
    path.write_text(HF_SCRIPT)
    script = load_script(path)
    tr = Trainer(script, TrainConfig(device="cpu", seed=0, node_sample_interval_s=None, label_smoothing=0.1,
                                     adaptive_clip=0.05))
    ref = script.new_model()
    ref.load_state_dict(tr.model.state_dict())
    ref.train()
    (ids,), y = script.get_batch(0)
    with torch.random.fork_rng(devices=[]):         # the trainer's stream, left for its step: the same dropout masks
        want = F.cross_entropy(ref(ids).logits, y, label_smoothing=0.1)
    want.backward()
    pre = [p.grad.norm().item() for p in ref.parameters() if p.grad is not None]
    reference_agc(ref, 0.05, 1e-3, False)
    row = tr.step()
    assert row.loss == pytest.approx(want.item(), rel=1e-5)
    got = [p.grad for p in tr.model.parameters() if p.grad is not None]
    for g, q in zip(got, [p.grad for p in ref.parameters() if p.grad is not None]):
        assert_close_to_magnitude(g, q, 1e-4)
    assert np.nanmax(row.param_norms) == pytest.approx(max(pre), rel=1e-4)
    assert (row.param_norms_clipped < row.param_norms * 0.999).sum() >= 10


def test_adaptive_clipping_time_is_not_charged_to_the_update_ratios(tmp_path, monkeypatch):
    """The update-ratio cadence budgets what the ratios cost; a slow clip must not thin them out."""
    import time as _time

    original = AdaptiveClip.apply

    def slow(self, params):
        _time.sleep(0.02)
        return original(self, params)

    monkeypatch.setattr(AdaptiveClip, "apply", slow)
    tr = Trainer(toggles(tmp_path), TrainConfig(device="cpu", seed=0, node_sample_interval_s=None,
                                               adaptive_clip=0.05))
    for _ in range(5):
        tr.step()
    assert tr.stats.adaptive_seconds >= 0.02
    assert tr._cadence.update_cost < 0.01          # ratios of a 4-16-5 MLP: microseconds, not the clip's 20 ms
