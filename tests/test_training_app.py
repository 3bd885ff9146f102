"""Live training in the window (pytest-qt, offscreen): start, pause, resume, stop, plots,
node colours, curve highlight, CSV export, clean close mid-training."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest


import gradviz.app  # noqa: E402,F401  (PySide6 workaround first)

from gradviz.app.training.history import History  # noqa: E402

from conftest import ROOT, SAMPLES  # noqa: E402

MLP = SAMPLES / "mlp_digits.py"
WAIT_MS = 120_000


@pytest.fixture
def win(qtbot, window):
    """The conftest window with the Training extension, the digits MLP open."""
    from gradviz.app.training import install

    panel = window.training_panel = install(window)
    panel.actions["show"].trigger()               # the Training docks, as Run > Start would show them
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(MLP)
    yield window
    panel.shutdown()


def _steps(panel):
    return panel.worker.step_index if panel.worker is not None else 0


def test_start_pause_resume_stop(qtbot, win):
    panel = win.training_panel
    norms_seen = []
    win.session.documentEdited.connect(lambda doc, what, info: what == "norms" and norms_seen.append(info["norms"]))
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) >= 40, timeout=WAIT_MS)
    panel.pause()
    qtbot.waitUntil(lambda: panel.state == "paused", timeout=10_000)
    n = _steps(panel)
    qtbot.wait(300)
    assert _steps(panel) == n                      # paused: the step count stopped
    # every step arrives (rows come in batches at <= 30 Hz, so the last batch may still be queued)
    qtbot.waitUntil(lambda: len(panel.history) == n, timeout=5_000)
    panel.step()
    qtbot.waitUntil(lambda: _steps(panel) == n + 1, timeout=10_000)
    panel.resume()
    qtbot.waitUntil(lambda: _steps(panel) >= n + 30, timeout=WAIT_MS)
    panel.stop()
    assert panel.worker.wait(10_000)
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=5_000)
    total = _steps(panel)
    qtbot.waitUntil(lambda: len(panel.history) == total, timeout=5_000)
    panel.plots.refresh(force=True)           # all plots now (a plain refresh stops at its 12 ms budget)
    assert panel.plots.points() == total            # the plots hold every step
    steps = panel.history.column("step")
    assert list(steps) == list(range(total))
    # live colours: sampled node norms use the graph's ids
    assert norms_seen and set(norms_seen[0]) <= set(win.document.graph.nodes)
    assert "param:fc1.weight" in norms_seen[0]
    assert panel.step_label.text() == f"{total:,} steps done"
    # the loss node shows the loss of the step training stopped at (measured then: #27), not the traced one
    from gradviz.app.formatting import num

    doc = win.document
    qtbot.waitUntil(lambda: doc.loss_step == total, timeout=5_000)
    assert win.scene.text_lines(win.scene.index["loss"])[1] == num(doc.live_loss) != num(doc.graph.graph["loss"])
    assert win.scene.values.loss_step == total and panel.loss_label.text().endswith(f"(step {total:,})")
    assert int(panel.history.column("step")[-1]) == total - 1      # the last row: step total - 1's loss
    assert panel.acc_label.text().startswith("accuracy")


def test_selected_parameter_curve_is_highlighted(qtbot, win):
    panel = win.training_panel
    panel.step()
    qtbot.waitUntil(lambda: len(panel.plots.param_curves) > 0 and len(panel.history) == 1, timeout=WAIT_MS)
    win.reveal("param:fc2.weight")           # (its Linear may be folded into a box in a small canvas)
    qtbot.waitUntil(lambda: win.selected == "param:fc2.weight", timeout=WAIT_MS)
    plots = panel.plots
    assert plots.highlighted == "fc2.weight"
    curve = plots.param_curves["fc2.weight"]
    assert curve.opts["pen"].widthF() > 2 and curve.zValue() > 0
    want = win.node_color("param:fc2.weight")
    if want is not None:
        assert curve.opts["pen"].color().rgb() == want.rgb()
    win.select_nodes(["op:3"])
    assert plots.highlighted is None and curve.opts["pen"].widthF() < 2
    # hovering: the label text at a step
    text, step = plots.loss_plot.describe(0.2)
    assert step == 0 and text.startswith("step 0") and "loss" in text
    # toggling a curve from the list
    plots.set_visible("fc1.bias", False)
    assert not plots.param_curves["fc1.bias"].isVisible()
    panel.stop()
    panel.worker.wait(10_000)


def test_csv_export(qtbot, win, tmp_path):
    panel = win.training_panel
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) >= 10, timeout=WAIT_MS)
    panel.stop()
    panel.worker.wait(10_000)
    out = panel.export_csv(str(tmp_path / "run.csv"))
    lines = out.read_text().splitlines()
    assert lines[0].startswith("step,loss,grad_norm") and "grad_norm:fc1.weight" in lines[0]
    assert len(lines) == len(panel.history) + 1


def test_history_is_bounded_and_keeps_whole_run():
    h = History(capacity=100, names=["a"])
    for start in range(0, 1000, 7):
        steps = np.arange(start, min(start + 7, 1000))
        h.extend({"step": steps, "loss": steps * 1.0, "param_norms": np.ones((len(steps), 1))})
    assert 50 <= len(h) <= 100
    s = h.column("step")
    assert s[0] == 0 and s[-1] >= 1000 - h.stride and np.all(np.diff(s) == h.stride)


CLOSE_SCRIPT = textwrap.dedent('''
    import os, sys
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    sys.path.insert(0, {root!r})
    import gradviz.app
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication
    from gradviz.app.main_window import MainWindow
    app = QApplication([])
    w = MainWindow(settings=QSettings({ini!r}, QSettings.IniFormat), extensions=True)
    w.show()
    panel = w.training_panel
    closing = []
    def rows(_cols):
        if not closing:                           # mid-training: the worker is running flat out
            closing.append(1)
            QTimer.singleShot(200, w.close)
            QTimer.singleShot(300, app.quit)
    def started():
        panel.start()
        panel.worker.rowsReady.connect(rows)
    w.graphShown.connect(started)
    w.open_script({mlp!r})
    app.exec()
    print("steps", panel.worker.step_index, "running", panel.worker.isRunning(), flush=True)
''')


def test_closing_window_mid_training_exits_cleanly(tmp_path):
    code = CLOSE_SCRIPT.format(root=str(ROOT), ini=str(tmp_path / "s.ini"), mlp=str(MLP))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "running False" in r.stdout, r.stdout + r.stderr
    assert "QThread: Destroyed" not in r.stderr and "Destroyed while thread" not in r.stderr, r.stderr
    steps = int(r.stdout.split()[1])
    assert steps > 0


def test_nonfinite_loss_is_shown_and_stops(qtbot, win, tmp_path):
    bad = tmp_path / "nan_mlp.py"
    bad.write_text(MLP.read_text().replace("    return F.cross_entropy(output, targets)",
                                           "    return F.cross_entropy(output, targets) * float('nan')"))
    import sys
    sys.path.insert(0, str(SAMPLES))               # the copy imports _digits from the samples folder
    errors = []
    win.show_error = lambda error, details="", title=None: errors.append(str(error))
    with qtbot.waitSignal(win.graphShown, timeout=WAIT_MS):
        win.open_script(bad)
    panel = win.training_panel
    panel.diagnose_nonfinite = lambda trainer, step, loss, x, y: "diagnosed"
    panel.start()
    qtbot.waitUntil(lambda: bool(errors), timeout=WAIT_MS)
    assert "step 0" in errors[0] and "non-finite" in errors[0] and "diagnosed" in errors[0]
    assert panel.worker.wait(10_000)
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=5_000)


def test_no_plot_starves_when_every_tick_is_over_budget(qtbot, monkeypatch):
    """Data arriving on every tick must not keep redrawing the first plots only."""
    from gradviz.app.training import plots as plots_mod

    history = History()
    history.set_names(["w"])
    widget = plots_mod.TrainingPlots(history)
    qtbot.addWidget(widget)
    widget.show()
    monkeypatch.setattr(plots_mod, "FRAME_BUDGET_S", -1.0)   # every tick draws one plot, then stops
    for step in range(len(widget.plots)):
        history.extend({"step": np.array([step]), "loss": np.array([1.0]), "lr": np.array([0.5]),
                        "grad_norm": np.array([1.0]), "grad_norm_clipped": np.array([1.0])})
        widget.refresh()
    x, y = widget.lr_curve.getData()
    assert x is not None and len(x) > 0 and np.all(y == 0.5)


def test_inspector_follows_the_selected_node_while_training(qtbot, win):
    """Sampled steps send the selected node's full statistics; the inspector shows them."""
    panel = win.training_panel
    nid = "param:fc2.weight"
    win.reveal(nid)
    qtbot.waitUntil(lambda: win.selected == nid, timeout=WAIT_MS)
    traced = win.inspector.field("grad norm")
    seen = []
    panel.start()
    panel.worker.nodeDetail.connect(lambda d: seen.append(d))
    qtbot.waitUntil(lambda: len(seen) >= 2, timeout=WAIT_MS)
    panel.stop()
    assert panel.worker.wait(10_000)
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=5_000)
    last = seen[-1]
    assert last["id"] == nid and last["grad"]["hist"] is not None and last["value"] is not None
    assert last["step"] < panel.worker.step_index
    # stopped: the model training stopped at is measured, and the inspector shows that step (#27)
    doc = win.document
    qtbot.waitUntil(lambda: doc.step == doc.model_step == panel.worker.step_index, timeout=5_000)
    assert doc.graph.nodes[nid]["grad_norm"] == pytest.approx(float(traced), rel=1e-3)   # the trace keeps step 0's
    assert win.inspector.field("grad norm") == "%.4g" % doc.step_nodes[nid]["grad_norm"] != traced
    assert win.inspector.gradient.values["step"] == f"step {doc.step:,}"


def test_trainer_detail_equals_torch():
    """The statistics a sampled step reports for one node equal torch's on the same step."""
    import torch
    from gradviz.core.train.trainer import TrainConfig, Trainer

    trainer = Trainer(str(MLP), TrainConfig(node_sample_every=1, seed=0))
    trainer.detail_node = "param:fc1.weight"
    for _ in range(3):
        row = trainer.step()
    detail = row.node_detail
    # replay the same three steps in plain torch: same seed, same batches, same optimizer
    from gradviz.core.script.load import load_script

    script = load_script(MLP)
    torch.manual_seed(0)
    model = script.new_model()
    opt = script.make_optimizer(model.parameters())
    for step in range(3):
        inputs, targets = script.get_batch(step)
        opt.zero_grad(set_to_none=True)
        loss = script.compute_loss(model, inputs, targets)
        loss.backward()
        if step == 2:
            grad = model.fc1.weight.grad
            assert detail["grad"]["norm"] == pytest.approx(grad.norm().item(), rel=1e-5)
            assert detail["grad"]["max"] == pytest.approx(grad.max().item(), rel=1e-5)
            assert detail["value"]["norm"] == pytest.approx(model.fc1.weight.norm().item(), rel=1e-5)
        opt.step()


def test_training_leaves_a_core_to_the_window(qtbot, win):
    """On the CPU the worker trains with all cores but one (the GUI thread's), then gives
    torch its thread count back."""
    import torch

    from gradviz.core.runtime.devices import training_threads

    before = torch.get_num_threads()
    panel = win.training_panel
    infos = []
    panel.start()
    panel.worker.ready.connect(infos.append)
    panel.reset()                                   # a rebuilt trainer reports again
    qtbot.waitUntil(lambda: bool(infos), timeout=WAIT_MS)
    panel.stop()
    assert panel.worker.wait(10_000)
    assert infos[-1]["device"] == "cpu"
    assert infos[-1]["threads"] == training_threads()
    assert 1 <= infos[-1]["threads"] <= max(1, before)
    assert torch.get_num_threads() == before        # the GUI thread's own count is untouched


def test_a_model_with_thousands_of_parameters_makes_curves_only_for_those_shown(qtbot):
    """GPT-200 has 2,406 parameters: making three pyqtgraph curves for each up front froze the
    window for minutes when training started (addItem walks every item already there)."""
    from gradviz.app.training import plots as plots_mod

    names = [f"blocks.{i}.w" for i in range(3000)]
    history = History()
    history.set_names(names)
    widget = plots_mod.TrainingPlots(history)
    qtbot.addWidget(widget)
    widget.set_names(names)
    assert widget.list.count() == 3000                                  # every parameter can be ticked
    assert set(widget.param_curves) == set(names[:plots_mod.DEFAULT_VISIBLE])
    assert len(widget.param_plot.getPlotItem().listDataItems()) <= 2 * plots_mod.DEFAULT_VISIBLE + 4
    norms = np.arange(3000, dtype=float)[None, :] + 1.0
    history.extend({"step": np.array([0]), "loss": np.array([1.0]), "lr": np.array([0.1]),
                    "grad_norm": np.array([1.0]), "grad_norm_clipped": np.array([1.0]),
                    "param_norms": norms, "param_norms_clipped": norms, "update_ratios": norms * 1e-3})
    widget.set_visible("blocks.2999.w", True)                           # ticked later: made then, and drawn
    assert widget.param_curves["blocks.2999.w"].isVisible()
    assert widget.param_curves["blocks.2999.w"].yData[-1] == 3000.0     # (the axis is logarithmic: yData is the raw norm)
    widget.highlight("blocks.1500.w")                                    # a parameter node selected in the graph
    assert widget.param_curves["blocks.1500.w"].opts["pen"].widthF() > 2
    widget.set_visible("blocks.7.w", False)
    assert not widget.param_curves["blocks.7.w"].isVisible()
    widget.set_visible("blocks.2000.w", False)                           # never shown: nothing to make
    assert "blocks.2000.w" not in widget.param_curves


def test_an_op_selected_after_stop_shows_its_statistics_at_the_step_training_stopped_at(qtbot, win):
    """After Stop the model training stopped at is kept: an op never measured there is measured on a job
    lane (a placeholder meanwhile), and its numbers are torch's at that step (#27)."""
    import copy

    import gradviz
    from gradviz.core.train.trainer import TrainConfig, Trainer

    panel = win.training_panel
    panel.start(pause_at=3)
    qtbot.waitUntil(lambda: panel.state == "paused" and _steps(panel) == 3, timeout=WAIT_MS)
    panel.stop()
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=10_000)
    doc = win.document
    qtbot.waitUntil(lambda: doc.step == doc.model_step == 3, timeout=5_000)
    op = next(n for n, a in doc.view.nodes(data=True) if a.get("kind") == "op" and n not in doc.step_nodes
              and a.get("grad_norm") is not None)
    win.reveal(op)
    qtbot.waitUntil(lambda: win.selected == op, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: op in doc.step_nodes, timeout=WAIT_MS)
    assert doc.step == 3
    trainer = Trainer(str(MLP), TrainConfig(seed=panel.worker.stopped_trainer.config.seed))
    for _ in range(3):
        trainer.step()
    oracle = gradviz.trace(str(MLP), model=copy.deepcopy(trainer.model), step=3).nodes[op]
    assert win.inspector.field("grad norm") == "%.4g" % oracle["grad_norm"]
    assert doc.step_nodes[op]["grad_std"] == pytest.approx(oracle["grad_std"], rel=1e-4)
    assert win.inspector.gradient.values["step"] == "step 3"
