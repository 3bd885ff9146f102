"""#27: every number on screen is the current step's and names it. Torch is the oracle: the
trained model's own gradients at the step the views name (``core/train/step_probe.py``: the
state at step S is the model after S updates, its gradient of step S's batch)."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from test_app_support import MLP, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)


def oracle(worker, step: int) -> dict:
    """{param id: (grad norm, value norm)} and the loss of the paused worker's model at ``step``,
    from a copy of it: one forward and backward of step ``step``'s batch, nothing of gradviz."""
    trainer = worker.trainer
    assert trainer.step_index == step
    model = copy.deepcopy(trainer.model)
    model.zero_grad(set_to_none=True)
    inputs, targets = trainer.script.get_batch(step)
    loss = trainer.script.compute_loss(model, inputs, targets)
    loss.backward()
    out = {f"param:{n}": (float(p.grad.norm()), float(p.detach().norm())) for n, p in model.named_parameters()}
    return out, float(loss.detach())


def train_and_pause(qtbot, window, n: int):
    panel = window.training_panel
    panel.train_steps(n)
    qtbot.waitUntil(lambda: window.document.norms_source == "training" and window.document.step == n
                    and panel.state == "paused", timeout=WAIT_MS)
    return panel


def test_selecting_a_parameter_after_training_shows_it_at_the_current_step(qtbot, full):
    """Issue #27 item 1: paused at step S, fc1.weight showed step 0's norm and std."""
    window = full
    open_and_wait(qtbot, window, MLP)
    traced = dict(window.document.graph.nodes["param:fc1.weight"])
    panel = train_and_pause(qtbot, window, 30)
    want, loss = oracle(panel.worker, 30)
    window.select_nodes(["param:fc1.weight"])
    insp = window.inspector
    assert insp.shown_step == 30 and insp.shown_state == "current"
    assert insp.gradient.values["step"] == "step 30" and insp.values.values["step"] == "step 30"
    grad, value = want["param:fc1.weight"]
    assert float(insp.field("grad norm")) == pytest.approx(grad, rel=1e-3)
    assert float(insp.field("value norm")) == pytest.approx(value, rel=1e-3)
    assert float(insp.field("grad norm")) != pytest.approx(traced["grad_norm"], rel=1e-3)   # not step 0's
    assert window.document.live_loss == pytest.approx(loss, rel=1e-5) and window.document.loss_step == 30
    assert "30" in window.status.step.text()


def test_fold_boxes_follow_training_and_unfolding_leaves_no_fold_in_the_inspector(qtbot, full, tmp_path):
    """Items 2 and 6: a fold's Inspector and sparkline stayed at step 0 while the module tree moved
    on; after unfolding, the Inspector still said "folded"."""
    import gradviz
    from test_window_model import BLOCKS

    from gradviz.app import fold_actions
    from gradviz.app.window_report import report

    window = full
    script = tmp_path / "blocks.py"
    script.write_text(BLOCKS)
    open_and_wait(qtbot, window, script)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.set_expanded({"", "blocks"})
    fold = next(n for n, a in window.document.view.nodes(data=True) if a.get("fold"))
    traced = list(window.document.view.nodes[fold]["repeat_norms"])
    panel = train_and_pause(qtbot, window, 12)
    oracle_graph = gradviz.trace(script, model=copy.deepcopy(panel.worker.trainer.model), step=12)
    want = [oracle_graph.graph["modules"][f"blocks.{i}"]["grad_norm"] for i in range(4)]
    window.select_nodes([fold])
    shown = report(window)["folds"]["Block × 4"]
    assert shown["step"] == 12 and shown["repeat_norms"] == pytest.approx(want, rel=1e-6)
    assert shown["repeat_norms"] != pytest.approx(traced, rel=1e-3)
    assert shown["first"] == pytest.approx(want[0], rel=2e-3) and shown["last"] == pytest.approx(want[-1], rel=2e-3)
    insp = window.inspector
    assert insp.gradient.values["step"] == "step 12"
    assert float(insp.field("grad norm")) == pytest.approx(math.sqrt(sum(v * v for v in want)), rel=2e-3)
    assert insp.field("first → last").startswith(f"{want[0]:.4g}")
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        fold_actions.unfold(window.session, window.document, window.document.view.nodes[fold], "all")
    qtbot.waitUntil(lambda: window.sync.settled(), timeout=WAIT_MS)
    assert fold not in window.document.view
    assert "folded" not in insp.subtitle.text() and insp.node_id != fold


def _gradviz(args: list[str], cwd) -> "subprocess.CompletedProcess":
    import os
    import subprocess
    import sys

    from test_app_support import ROOT

    code = f"import sys; from gradviz.cli.main import main; sys.exit(main({args!r}))"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_screenshot_mode_trains_selects_and_reports_what_every_panel_shows(tmp_path):
    """``gradviz SCRIPT --screenshot out.png --train-steps N --select NODE --report out.json``: the
    report's numbers are torch's at step N (a replayed Trainer and a fresh trace of its model)."""
    import json

    import gradviz
    from gradviz.core.train.trainer import TrainConfig, Trainer

    out, rep = tmp_path / "shot.png", tmp_path / "r.json"
    proc = _gradviz([str(MLP), "--screenshot", str(out), "--train-steps", "20", "--select", "fc1.weight",
                     "--report", str(rep), "--size", "1200x800"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
    r = json.loads(rep.read_text())
    trainer = Trainer(str(MLP), TrainConfig())
    trainer.run(20)
    oracle_graph = gradviz.trace(MLP, model=copy.deepcopy(trainer.model), step=20)
    want = oracle_graph.nodes["param:fc1.weight"]
    assert r["step"] == 20 and r["inspector"]["node"] == "param:fc1.weight" and r["inspector"]["step"] == 20
    assert r["inspector"]["grad_norm"] == pytest.approx(want["grad_norm"], rel=2e-3)
    assert r["inspector"]["grad_std"] == pytest.approx(want["grad_std"], rel=2e-3)
    assert r["inspector"]["value_norm"] == pytest.approx(want["value_norm"], rel=2e-3)
    assert r["modules"]["fc2"]["grad_norm"] == pytest.approx(oracle_graph.graph["modules"]["fc2"]["grad_norm"], rel=2e-3)
    assert r["training"]["loss"] == pytest.approx(oracle_graph.graph["loss"], rel=2e-3)
    assert r["training"]["loss_step"] == 20 and "training step 20" in r["export_header"]
    # every plot drawn to the last row (step 19's loss: the row of the step that led to step 20), not
    # to where a frame budget left it (a grab right after the pause had the norms at step 8)
    assert r["training"]["plots_drawn_to"] == {"loss": 19.0, "grad_norm": 19.0, "lr": 19.0}
    assert _gradviz([str(MLP), "--report", "r.json"], tmp_path).returncode == 2       # only with --screenshot


def test_screenshot_mode_refuses_a_node_the_graph_does_not_have(qtbot, full):
    """``--select nope``: one line naming it, no grab (the driver's stage ends the screenshot)."""
    from gradviz.app.screenshot_script import ScreenshotDriver, ScreenshotPlan, resolve_node

    open_and_wait(qtbot, full, MLP)
    doc = full.document
    assert resolve_node(doc, "fc1.weight") == "param:fc1.weight" and resolve_node(doc, "nope") is None
    assert resolve_node(doc, "group:nope") is None and resolve_node(doc, "loss") == "loss"
    ended = []
    driver = ScreenshotDriver(full, ScreenshotPlan(select="nope"), ended.append)
    driver.start()
    qtbot.waitUntil(lambda: bool(ended), timeout=WAIT_MS)
    assert ended == ["--select nope: no such node or module in the graph"]


def test_a_screenshot_after_training_grabs_every_plot_drawn_to_the_last_step(qtbot, full, monkeypatch):
    """A timer tick draws only the plots that fit its frame budget, so a grab right after training
    paused caught the CNN's loss at step 20 and its norms at step 8. The grab no longer waits on the
    timer: with the timer drawing nothing at all, every plot is still drawn to the last row."""
    from gradviz.app.screenshot_script import ScreenshotDriver, ScreenshotPlan
    from gradviz.app.training import plots
    from gradviz.app.window_report import report

    timed = plots.TrainingPlots.refresh
    monkeypatch.setattr(plots.TrainingPlots, "refresh", lambda self, force=False: timed(self, True) if force else None)
    open_and_wait(qtbot, full, MLP)
    ended = []
    driver = ScreenshotDriver(full, ScreenshotPlan(train_steps=12),
                              lambda error: ended.append((error, report(full)["training"]["plots_drawn_to"])))
    driver.start()
    qtbot.waitUntil(lambda: bool(ended), timeout=WAIT_MS)
    assert ended == [(None, {"loss": 11.0, "grad_norm": 11.0, "lr": 11.0})]
