"""The views' panels on the real window (pytest-qt): Attribution, the failing forward, cut branches, Compare."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_app_support import MLP, SAMPLES, TRANSFORMER, WAIT_MS, load_module, open_and_wait

from gradviz.app import attribution


@pytest.fixture
def attr(window):
    return attribution.install(window)["panel"]


def _run(qtbot, panel, method="saliency", target="loss", steps=50):
    panel.method.setCurrentIndex(panel.method.findData(method))
    panel.target.setCurrentText(target)
    panel.steps.setValue(steps)
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
        panel.run()
    return panel.result


def _oracle_saliency(path):
    module = load_module(path)
    torch.manual_seed(0)
    model = module.model().eval()
    inputs, targets = module.batch(0)
    x = inputs.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(module.loss_fn(model(x), targets), [x])
    return g.abs().numpy()


def test_attribution_panel_follows_the_documents(qtbot, window, attr):
    open_and_wait(qtbot, window, MLP)
    result = _run(qtbot, attr, "saliency")
    np.testing.assert_allclose(result.inputs[0].attribution, _oracle_saliency(MLP), rtol=1e-5, atol=1e-9)
    assert window.document.parts["attribution"] is result
    assert attr.figure.height() > 200 and attr.example.maximum() == 63
    assert "eval mode" in attr.status.text() and "not trained here" in attr.status.text()
    # tooltips name what is under the pointer: the 8x8 map of the 64 features
    attr.figure.repaint()
    assert any(h.text.startswith("feature") for h in attr.figure.hits)
    attr.example.setValue(5)
    assert attr.figure.example == 5
    attr.whole_batch.setChecked(True)
    assert attr.figure.example is None

    ig = _run(qtbot, attr, "ig", steps=64)
    assert ig.completeness.ok and "Completeness holds" in attr.status.text()

    # another script: nothing of the MLP's attribution stays
    open_and_wait(qtbot, window, TRANSFORMER)
    assert attr.result is None and attr.figure.height() == 0 and "attribution" not in window.document.parts
    tokens = _run(qtbot, attr, "saliency", target="3")
    assert tokens.inputs[0].kind == "tokens" and tokens.inputs[0].through == "tok_emb"


def test_a_late_attribution_never_lands_in_the_next_script(qtbot, window, attr):
    open_and_wait(qtbot, window, MLP)
    attr.method.setCurrentIndex(attr.method.findData("ig"))
    attr.steps.setValue(2000)
    job = attr.run()
    qtbot.waitUntil(lambda: attr.progress.maximum() > 1, timeout=WAIT_MS)   # it is running
    open_and_wait(qtbot, window, SAMPLES / "cnn.py")
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    assert attr.result is None and "attribution" not in window.document.parts
    assert attr.run_button.isEnabled()


def test_attribution_needs_a_script(qtbot, window, attr):
    assert attr.run() is None and "Open a model script" in attr.status.text()
    open_and_wait(qtbot, window, MLP)
    attr.baseline.setCurrentText("middle")
    assert attr.run() is None and "baseline" in attr.status.text()


# -- the failing forward and cut branches in the window ---------------------------------------

VIEWS = SAMPLES.parent / "tests" / "scripts" / "views"


def test_failing_forward_is_drawn_and_the_document_stays_failed(qtbot, window):
    from gradviz.app import failing_forward

    part = failing_forward.install(window)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(VIEWS / "bad_dtype.py")
    doc = window.document
    assert doc.status == "failed" and window.windowTitle() == "bad_dtype.py (could not open)"
    assert doc.graph.graph["partial"] and doc.graph.nodes["failed"]["op"] == "mm"
    i = window.scene.index["failed"]
    assert window.scene.fill_colors[i] == window.scene.theme.color("broken")
    assert window.scene.marks().counts() == {"failed": 1}
    assert not window.error_dock.isHidden()                    # the error is still told
    # a script that does not even load has nothing to draw
    with qtbot.waitSignal(window.traceFailed, timeout=WAIT_MS):
        window.open_script(SAMPLES.parent / "tests" / "scripts" / "bad_syntax.py")
    assert part.job is None or window.document.graph is None
    assert window.scene.index == {}
    # a working script afterwards: a normal document
    open_and_wait(qtbot, window, MLP)
    assert window.document.status == "ready" and window.scene.marks().counts() == {}


def test_cut_branches_in_the_window(qtbot, window):
    open_and_wait(qtbot, window, SAMPLES / "bugs" / "detach.py")
    doc = window.document
    cut = next(n for n, a in doc.graph.nodes(data=True) if a.get("cut_point"))
    if doc.visible_id(cut) != cut:       # small graph: shown whole; otherwise open the modules
        window.expand_all()
    qtbot.waitUntil(lambda: doc.visible_id(cut) == cut, timeout=WAIT_MS)
    assert window.scene.marks().counts().get("cut-branch") == 1
    assert any(b.dashed for b in window.scene.edge_batches)
    window.select_nodes([cut])
    assert window.selected == cut and window.inspector.node_id == cut


# -- compare ---------------------------------------------------------------------------------

def test_compare_panel(qtbot, window, tmp_path):
    from gradviz.app import compare
    from test_compare import record

    before, after = record(tmp_path / "before.gvrun", detach=True), record(tmp_path / "after.gvrun")
    panel = compare.install(window)["panel"]
    panel.side_a.setText(str(before))
    panel.side_b.setText(str(after))
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
        panel.run()
    c = panel.result.comparison
    assert panel.params_table.rowCount() == len(c.params) == 6
    assert panel.params_table.item(0, 4).text() == "appeared"
    assert "matched by module, op and order" in panel.status.text()
    ratio = panel.scenes["ratio"]
    assert ratio.color_scale().cmap is not None and ratio.color_scale().hi == panel.result.views.limit
    i = ratio.index["param:encoder.0.weight"]
    red = ratio.fill_colors[i]
    assert red.red() > 150 and red.blue() < 100               # appeared: the red end
    assert panel.scenes["a"].color_scale().lo == panel.scenes["b"].color_scale().lo    # one range
    shown = panel.select("encoder.0.weight")
    assert shown and panel.scenes["b"].node_item(shown).isSelected()
    # a new document clears what the panel showed
    open_and_wait(qtbot, window, MLP)
    assert panel.result is None and panel.params_table.rowCount() == 0 and not panel.scenes["ratio"].index
    panel.side_a.setText(str(tmp_path / "missing.gvrun"))
    panel.run()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Cannot compare"), timeout=WAIT_MS)
    assert "no such run file" in panel.status.text()
