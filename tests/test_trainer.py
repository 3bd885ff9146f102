"""The Trainer (no Qt) and the ``gradviz train`` command."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import gradviz
from gradviz.core.script.load import ScriptError, load_script
from gradviz.core.train.trainer import NonFiniteLossError, TrainConfig, Trainer, lr_factor

from conftest import ROOT, SAMPLES
from tolerance import assert_close_to_magnitude

TINY = '''
import torch
from torch import nn
import torch.nn.functional as F

BIG = 12
K = {k}

def model():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))

def _big(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(BIG, 4, generator=g), torch.randint(3, (BIG,), generator=g)

def batch(i):
    # micro-batch i = chunk i % K of big batch i // K
    x, y = _big(i // K)
    n = BIG // K
    j = i % K
    return x[j * n:(j + 1) * n], y[j * n:(j + 1) * n]

def loss_fn(out, y):
    return F.cross_entropy(out, y){extra}

def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)
'''


def tiny(tmp_path, k=1, extra="", name="tiny.py"):
    path = tmp_path / name
    path.write_text(TINY.format(k=k, extra=extra))
    return load_script(path)


def cfg(**kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("node_sample_interval_s", None)
    return TrainConfig(**kw)


def test_pre_clip_norm_equals_clip_grad_norm(tmp_path):
    script = tiny(tmp_path)
    tr = Trainer(script, cfg(max_grad_norm=0.01))
    torch.manual_seed(0)
    ref = script.new_model()
    ref.load_state_dict(tr.model.state_dict())
    x, y = script.get_batch(0)
    script.compute_loss(ref, x, y).backward()
    expected = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01).item()
    row = tr.step()
    assert row.grad_norm == pytest.approx(expected, rel=1e-5)
    assert row.grad_norm_clipped <= 0.01 + 1e-6
    post = math.sqrt(sum(p.grad.norm().item() ** 2 for p in tr.model.parameters()))
    assert post == pytest.approx(row.grad_norm_clipped, rel=1e-4)


def test_accumulation_equals_big_batch(tmp_path):
    one = Trainer(tiny(tmp_path, k=1, name="one.py"), cfg(lr=0.0))
    three = Trainer(tiny(tmp_path, k=3, name="three.py"), cfg(lr=0.0, accumulation=3))
    # same weights
    three.model.load_state_dict(one.model.state_dict())
    r1 = one.step()
    r3 = three.step()
    for p, q in zip(one.model.parameters(), three.model.parameters()):
        assert_close_to_magnitude(p.grad, q.grad, 1e-5)
    assert r3.loss == pytest.approx(r1.loss, rel=1e-5)
    assert r3.grad_norm == pytest.approx(r1.grad_norm, rel=1e-5)


def test_zero_grad_off_accumulates(tmp_path):
    script = tiny(tmp_path)
    tr = Trainer(script, cfg(lr=0.0, zero_grad_every_step=False))
    # batch(step) differs per step: compare with the sum of the two steps' gradients
    torch.manual_seed(0)
    ref = script.new_model()
    ref.load_state_dict(tr.model.state_dict())
    for s in range(2):
        x, y = script.get_batch(s)
        script.compute_loss(ref, x, y).backward()
    tr.step()
    first = [p.grad.clone() for p in tr.model.parameters()]
    tr.step()
    for p, q in zip(ref.parameters(), tr.model.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    # and with the same batch twice: exactly 2x one step's gradient
    same = tiny(tmp_path, extra="\n\ndef _fixed(i):\n    return _big(0)\nbatch = _fixed", name="same.py")
    tr2 = Trainer(same, cfg(lr=0.0, zero_grad_every_step=False))
    tr2.step()
    once = [p.grad.clone() for p in tr2.model.parameters()]
    tr2.step()
    for g1, p in zip(once, tr2.model.parameters()):
        torch.testing.assert_close(p.grad, 2 * g1)
    assert first


def test_param_norms_and_update_ratios(tmp_path):
    script = tiny(tmp_path)
    tr = Trainer(script, cfg(optimizer="adam", lr=0.01, update_ratio_every=1))
    tr.step()
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
    row = tr.step()
    grads = {n: p.grad.norm().item() for n, p in tr.model.named_parameters()}
    for i, name in enumerate(tr.names):
        assert row.param_norms[i] == pytest.approx(grads[name], rel=1e-5)
        after = dict(tr.model.named_parameters())[name].detach()
        ratio = (after - before[name]).norm().item() / before[name].norm().item()
        assert row.update_ratios[i] == pytest.approx(ratio, rel=1e-4)
    assert row.step == 1 and tr.step_index == 2 and row.lr == 0.01


def test_node_norms_equal_trace_ids():
    script = load_script(SAMPLES / "mlp_digits.py")
    graph = gradviz.trace(script, step=0, seed=0)
    tr = Trainer(script, cfg(node_sample_every=1, seed=0))
    row = tr.step()
    norms = row.node_norms
    assert set(norms) == set(graph.nodes)
    for nid, attrs in graph.nodes(data=True):
        want = attrs["grad_norm"]
        assert (want is None) == (norms[nid] is None), nid
        if want is not None:
            assert norms[nid] == pytest.approx(want, rel=1e-4, abs=1e-10), nid
    assert tr.step().node_norms is not None
    tr.config.node_sample_every = 5
    assert tr.step().node_norms is None


def test_update_ratio_cadence(tmp_path):
    tr = Trainer(tiny(tmp_path), cfg(update_ratio_every=3))
    rows = [tr.step() for _ in range(6)]
    measured = [not np.all(np.isnan(r.update_ratios)) for r in rows]
    assert measured == [True, False, False, True, False, False]


def test_schedules():
    c = TrainConfig(schedule="step", step_size=10, gamma=0.5)
    assert lr_factor(c, 9) == 1.0 and lr_factor(c, 10) == 0.5 and lr_factor(c, 25) == 0.25
    c = TrainConfig(schedule="cosine", total_steps=100)
    assert lr_factor(c, 0) == 1.0 and lr_factor(c, 50) == pytest.approx(0.5) and lr_factor(c, 100) == pytest.approx(0)


def test_schedule_applied_per_step(tmp_path):
    tr = Trainer(tiny(tmp_path), cfg(schedule="step", step_size=2, gamma=0.1, lr=1.0))
    lrs = [tr.step().lr for _ in range(5)]
    assert lrs == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01])


def test_nonfinite_loss_stops_with_step(tmp_path):
    extra = "\n\n_ce = loss_fn\ndef loss_fn(out, y):\n    l = _ce(out, y)\n    return l * float('nan') if STEP[0] >= 2 else l\n"
    extra += "STEP = [0]\n_b = batch\ndef batch(i):\n    STEP[0] = i\n    return _b(i)\n"
    script = tiny(tmp_path, extra=extra)
    seen = []
    tr = Trainer(script, cfg(diagnose_nonfinite=lambda t, s, loss, x, y: seen.append(s) or "origin: op:3"))
    tr.step(), tr.step()
    before = [p.detach().clone() for p in tr.model.parameters()]
    with pytest.raises(NonFiniteLossError) as info:
        tr.step()
    assert info.value.step == 2 and "step 2" in str(info.value) and "nan" in str(info.value)
    assert "origin: op:3" in str(info.value) and seen == [2]
    for b, p in zip(before, tr.model.parameters()):
        torch.testing.assert_close(b, p.detach())       # the bad update was undone
    assert tr.step_index == 2


def test_script_error_has_step_and_location(tmp_path):
    extra = "\n\n_b = batch\ndef batch(i):\n    if i == 3:\n        raise ValueError('bad batch')\n    return _b(i)\n"
    script = tiny(tmp_path, extra=extra)
    tr = Trainer(script, cfg())
    tr.run(3)
    with pytest.raises(ScriptError) as info:
        tr.step()
    err = info.value
    assert err.step == 3 and "step 3" in str(err) and "bad batch" in str(err)
    assert err.path.endswith("tiny.py") and err.line


def test_reset_and_evaluate(tmp_path):
    tr = Trainer(tiny(tmp_path), cfg())
    w0 = [p.detach().clone() for p in tr.model.parameters()]
    tr.run(3)
    assert tr.evaluate() == {}
    tr.reset()
    assert tr.step_index == 0
    for a, p in zip(w0, tr.model.parameters()):
        torch.testing.assert_close(a, p.detach())


def test_digits_mlp_learns_fast():
    tr = Trainer(load_script(SAMPLES / "mlp_digits.py"), TrainConfig(device="cpu", seed=0))
    first = tr.step().loss
    rows = []
    acc = 0.0
    while tr.step_index < 1000:
        tr.run(50, rows.append)
        acc = tr.evaluate()["accuracy"]
        if acc >= 0.9:
            break
    assert acc >= 0.90, acc                 # (its speed: benchmarks/bench_training.py)
    assert rows[-1].loss < first / 2


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gradviz", "train", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=env)


def test_training_threads_leave_a_core_free_or_follow_omp_num_threads(monkeypatch):
    """The window's and gradviz train's policy: OMP_NUM_THREADS when set, else every core this
    process may use but one (torch's default takes all: with one busy, its workers spin)."""
    from gradviz.core.runtime import devices

    monkeypatch.setattr(devices, "_cores", lambda: 8)
    monkeypatch.setattr(devices, "_TORCH_DEFAULT_THREADS", 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert devices.training_threads() == 7
    monkeypatch.setattr(devices, "_TORCH_DEFAULT_THREADS", 4)        # torch's own cap (physical cores)
    assert devices.training_threads() == 4
    monkeypatch.setattr(devices, "_cores", lambda: 1)
    assert devices.training_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert devices.training_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    assert devices.training_threads() == 1


@pytest.mark.parametrize("omp", [None, "1"])
def test_cli_train_uses_the_thread_policy(omp):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    r = _cli(str(SAMPLES / "mlp_digits.py"), "--steps", "3", "--json", "--device", "cpu", env=env)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    if omp:
        assert summary["threads"] == int(omp)
    else:
        assert 1 <= summary["threads"] <= max(1, len(os.sched_getaffinity(0)) - 1)


def test_cli_summary_and_json():
    r = _cli(str(SAMPLES / "mlp_digits.py"), "--steps", "30", "--every", "10", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "step     30" in r.stdout and "accuracy:" in r.stdout and "final loss" in r.stdout
    r = _cli(str(SAMPLES / "mlp_digits.py"), "--steps", "20", "--every", "10", "--json", "--clip", "1",
             "--accum", "2", "--optimizer", "sgd-momentum", "--lr", "0.05")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["step"] for d in lines[:-1]] == [10, 20]
    assert lines[-1]["summary"] and lines[-1]["steps"] == 20 and "accuracy" in lines[-1]["metrics"]
    assert lines[0]["lr"] == 0.05


def test_cli_exit_codes(tmp_path):
    r = _cli(str(SAMPLES / "bugs" / "syntax_error.py"), "--steps", "2")
    assert r.returncode == 2 and "syntax_error.py:" in r.stderr
    bad = tmp_path / "nan.py"
    bad.write_text(TINY.format(k=1, extra="\n\n_ce = loss_fn\ndef loss_fn(o, y):\n    return _ce(o, y) / 0 * 0\n"))
    r = _cli(str(bad), "--steps", "5")
    assert r.returncode == 1 and "step 0" in r.stderr and "non-finite" in r.stderr


@pytest.mark.parametrize("clip", [None, 0.5])
def test_rows_one_by_one_equal_batch_columns_and_torch(clip):
    """Trainer.step's StepRows read one by one, or converted in one batch (the training
    worker), hold the same numbers, and those are torch's."""
    from gradviz.app.training.worker import rows_to_columns
    from gradviz.core.stats.steps import StepRow

    cfg = TrainConfig(device="cpu", seed=0, node_sample_interval_s=None, max_grad_norm=clip, update_ratio_every=2)
    tr = Trainer(str(SAMPLES / "mlp_digits.py"), cfg)
    rows = [tr.step() for _ in range(12)]
    assert all(isinstance(r, StepRow) and r.node_norms is None for r in rows)
    batch = rows_to_columns(rows)
    for i, r in enumerate(rows):
        assert batch["step"][i] == r.step == i
        for key in ("loss", "grad_norm", "grad_norm_clipped", "lr", "step_time", "nonfinite"):
            assert batch[key][i] == getattr(r, key) or (math.isnan(batch[key][i]) and math.isnan(getattr(r, key)))
        assert np.array_equal(batch["param_norms"][i], r.param_norms.astype(np.float32), equal_nan=True)
        assert np.array_equal(batch["update_ratios"][i], r.update_ratios.astype(np.float32), equal_nan=True)
    assert not np.isnan(batch["update_ratios"][0]).any() and np.isnan(batch["update_ratios"][1]).all()
    assert set(rows[3].as_dict()) >= {"step", "loss", "grad_norm", "param_norms", "node_norms"}
    # and the same numbers as a plain loop measured with torch
    torch.manual_seed(0)
    again = Trainer(str(SAMPLES / "mlp_digits.py"), cfg)
    again.step()
    grads = {n: p.grad.norm().item() for n, p in again.model.named_parameters()}
    total = math.sqrt(sum(v * v for v in grads.values()))
    first = Trainer(str(SAMPLES / "mlp_digits.py"), cfg).step()
    # (with clipping, p.grad after the step is the clipped gradient)
    assert (first.grad_norm if clip is None else first.grad_norm_clipped) == pytest.approx(total, rel=1e-5)
    if clip is None:
        assert [first.param_norms[i] for i in range(len(grads))] == pytest.approx(list(grads.values()), rel=1e-5)


def _seeded_draw(seed):
    from gradviz.core.runtime.random_state import seeded

    with seeded(seed):                 # as a trace, replay or gradient check seeds
        torch.rand(99)


def test_training_keeps_its_random_stream_when_others_seed_between_steps(tmp_path):
    """A trace, replay or check seeding torch's generator on another thread between two training steps
    (the window's lanes do) leaves the run's dropout masks as they were: the losses equal an undisturbed
    run's to the bit."""
    script = tiny(tmp_path, extra="\n\ndef model():\n    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), "
                                  "nn.Linear(8, 3))")

    def losses(disturb):
        trainer = Trainer(script, cfg(seed=0))
        out = []
        for i in range(4):
            out.append(trainer.step().loss)
            if disturb:
                import threading
                t = threading.Thread(target=lambda: _seeded_draw(1000 + i))
                t.start()
                t.join()
        return out

    # the oracle: the same four steps in plain torch, nobody seeding in between
    torch.manual_seed(0)
    model = script.new_model()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    oracle = []
    for i in range(4):
        x, y = script.get_batch(i)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(*x), y)
        loss.backward()
        opt.step()
        oracle.append(loss.item())
    assert losses(False) == pytest.approx(oracle, rel=1e-6)
    assert losses(True) == pytest.approx(oracle, rel=1e-6)
