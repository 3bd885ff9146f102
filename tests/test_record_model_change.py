"""A model that changes under ``watch`` (issue #24, part B): parameters replaced, added or removed
mid-run are followed from that step on, and the run file says so.

Before: the old parameters' frozen norms kept being recorded and the new ones never, with no
word. torch is the oracle: each step's recorded norms are the ``p.grad.norm()`` of the
parameters the model has at that step.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gradviz.core.record import open_run, watch

ROOT = Path(__file__).resolve().parent.parent


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        if hasattr(self, "extra") and isinstance(self.extra, nn.Linear):
            h = h + self.extra(h)
        return self.fc(h)


def _train(model, opt, w, steps, change_at):
    """Train ``steps`` steps; ``change_at[step]()`` changes the model before that step.
    Returns {step: {name: torch's grad norm}} of the parameters the model had at that step."""
    oracle = {}
    for step in range(steps):
        if step in change_at:
            change_at[step]()
            opt.param_groups[0]["params"] = [p for p in model.parameters()]
        opt.zero_grad()
        x = torch.randn(5, 6, generator=torch.Generator().manual_seed(step))
        loss = model(x).pow(2).mean()
        loss.backward()
        oracle[step] = {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}
        w.step(loss)
        opt.step()
    return oracle


def _check_against_torch(path, oracle):
    with open_run(path) as r:
        s, names = r.steps(), r.param_names
        for i, step in enumerate(s["step"].tolist()):
            want = oracle[step]
            for j, name in enumerate(names):
                if name in want:
                    assert s["has_grad"][i, j], (step, name)
                    np.testing.assert_allclose(s["grad_norms"][i, j], want[name], rtol=1e-5, err_msg=f"{step} {name}")
                else:                           # not (or no longer) in the model at that step
                    assert not s["has_grad"][i, j], (step, name)
        return r.meta, s


def test_a_replaced_layer_is_followed_from_that_step_on(tmp_path, accel):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "replaced.gvrun"

    def replace():
        model.fc = nn.Linear(8, 3)

    with watch(model, path, every=2, optimizer=opt) as w:
        oracle = _train(model, opt, w, 8, {4: replace})
    meta, s = _check_against_torch(path, oracle)
    assert meta["model_changes"] == [{"step": 4, "added": [], "removed": [], "replaced": ["fc.weight", "fc.bias"]}]
    assert np.isfinite(s["update_ratio"][5:]).all()              # the new parameters' updates are measured
    with open_run(path) as r:                                     # node norms of the new graph's parameters
        g = r.graph_at(6)
        np.testing.assert_allclose(g.nodes["param:fc.weight"]["grad_norm"], oracle[6]["fc.weight"], rtol=1e-5)


def test_added_and_removed_parameters_get_their_own_columns(tmp_path, accel):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "grown.gvrun"

    def add():
        model.extra = nn.Linear(8, 8)

    def remove():
        model.extra = nn.Identity()

    def reshape():
        model.fc = nn.Linear(8, 5)

    with watch(model, path, every=3, optimizer=opt) as w:
        oracle = _train(model, opt, w, 12, {3: add, 6: remove, 9: reshape})
    meta, s = _check_against_torch(path, oracle)
    assert meta["param_names"] == ["body.weight", "body.bias", "fc.weight", "fc.bias", "extra.weight", "extra.bias"]
    assert meta["param_shapes"][2] == [5, 8]                     # the latest shape
    assert [c["step"] for c in meta["model_changes"]] == [3, 6, 9]
    assert meta["model_changes"][1]["removed"] == ["extra.weight", "extra.bias"]
    # runs show reads the grown file and names the change
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path), "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    (found,) = [f for f in info["findings"] if f["code"] == "run-model-changed"]
    assert "step 3: added extra.weight" in found["message"] and "step 6: removed extra.weight" in found["message"]
    assert info["ranks"][0]["model_changes"] == meta["model_changes"]
    text = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path)], env=env,
                          capture_output=True, text=True, timeout=120).stdout
    assert "run-model-changed" in text


def test_a_model_that_never_changes_has_no_change_and_costs_no_comparison(tmp_path):
    model = Net()
    building_other_models = []
    with watch(model, tmp_path / "same.gvrun", every=0) as w:
        for step in range(3):
            building_other_models.append(nn.Linear(3, 3))       # registration hooks fire, not for this model
            model.zero_grad()
            model(torch.randn(2, 6)).sum().backward()
            w.step(1.0)
            assert not w._follower.changed
        model.fc = model.fc                                     # assigned again, the same module: no change
        model.zero_grad()
        model(torch.randn(2, 6)).sum().backward()
        w.step(1.0)
    with open_run(tmp_path / "same.gvrun") as r:
        assert "model_changes" not in r.meta
