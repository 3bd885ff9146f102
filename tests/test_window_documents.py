"""#12 item 1: results of the previous script never stay on screen. A user's sequence:
gradcheck, health check and training on one script, then another script, then one that
fails to open — every panel is compared with the new state each time."""
from __future__ import annotations

import pytest

from test_app_support import MLP, SAMPLES, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)

DETACH = SAMPLES / "bugs" / "detach.py"


def _everything_of(win, script):
    """What each panel shows must be about ``script`` only."""
    diag, grad, train = win.diagnosis_panels["diagnosis"], win.diagnosis_panels["gradcheck"], win.training_panel
    doc = win.document
    assert doc.path == script.resolve()
    assert diag.findings() == [] and diag.browser.toPlainText() == "" and doc.findings is None
    assert grad.table.rowCount() == 0 and doc.gradcheck is None
    params = [grad.params.item(i).text() for i in range(grad.params.count())]
    graph_params = sorted(a["param"] for _, a in doc.graph.nodes(data=True) if a.get("kind") == "param")
    assert sorted(params) == graph_params
    assert train.state == "stopped" and len(train.history) == 0
    assert train.step_label.text() == "step —" and train.acc_label.text() == ""
    assert not train.actions["pause"].isEnabled() and not train.actions["stop"].isEnabled()
    assert win.selected == "" and win.inspector.node_id == ""
    assert win.inspector.field("script") == script.name
    assert not doc.norms and not doc.marked_edges and not doc.marked_nodes
    assert not win.scene.marks().edges.get("broken") and not win.scene.marks().nodes
    assert win.windowTitle() == script.name


def test_results_of_one_script_never_reach_the_next(qtbot, full, tmp_path):
    win = full
    assert not win.legend.isVisible() and win.view.bottom_margin == 0     # no colour bar over nothing
    open_and_wait(qtbot, win, MLP)
    assert win.legend.isVisible()
    grad = win.diagnosis_panels["gradcheck"]
    grad.samples.setValue(2)
    with qtbot.waitSignal(grad.checkFinished, timeout=WAIT_MS):
        grad.run_check()
    assert grad.table.rowCount() >= 3 and grad.table.item(0, 0).text() == "fc1.weight"
    train = win.training_panel
    train.start()
    qtbot.waitUntil(lambda: len(train.history) >= 20, timeout=WAIT_MS)
    train.stop()
    qtbot.waitUntil(lambda: train.state == "stopped", timeout=WAIT_MS)
    assert train.step_label.text() != "step —"
    assert win.document.norms and win.document.live_loss is not None

    # another script: nothing of the MLP stays
    open_and_wait(qtbot, win, DETACH)
    _everything_of(win, DETACH)
    diag = win.diagnosis_panels["diagnosis"]
    with qtbot.waitSignal(diag.checkFinished, timeout=WAIT_MS):
        diag.run_check()
    finding = diag.findings()[0]
    assert finding["code"] == "unreachable" and win.scene.marks().edges.get("broken")

    # back to the MLP: the finding of detach.py is gone, and can select nothing here
    open_and_wait(qtbot, win, MLP)
    _everything_of(win, MLP)
    with pytest.raises(IndexError):
        diag.activate(0)

    # a script that fails to open: everything is cleared and the title says so
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\nmodel = lambda: torch.nn.Linear(2, 2)\ndef batch(step):\n    raise "
                   "RuntimeError('no data')\ndef loss_fn(o, t):\n    return o.sum()\n")
    with qtbot.waitSignal(win.traceFailed, timeout=WAIT_MS):
        win.open_script(bad)
    doc = win.document
    assert doc.status == "failed" and doc.graph is None
    assert win.windowTitle() == "broken.py (could not open)"
    assert not win.scene.ids and win.outline.item("fc1") is None and grad.params.count() == 0
    assert not win.legend.isVisible()
    assert win.inspector.node_id == "" and win.inspector.title.text() == "Nothing selected"
    assert "no data" in win.errors.text() and win.error_dock.isVisible()
    assert win.statusBar().currentMessage().startswith("could not open broken.py")
    assert win.status.script.text() == "broken.py" and win.status.size_label.text() == ""
    open_and_wait(qtbot, win, MLP)
    assert win.statusBar().currentMessage() == ""            # nothing said about the failed one stays
