"""The views' panels on the real window (pytest-qt): Attribution, the failing forward, cut branches, Compare."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_app_support import MLP, SAMPLES, TRANSFORMER, WAIT_MS, load_module, open_and_wait

from gradviz.app import attribution
from tolerance import assert_close_to_magnitude


@pytest.fixture
def attr(window):
    parts = attribution.install(window)
    parts["action"].trigger()          # Diagnose > Input attribution... (a bottom panel starts hidden)
    return parts["panel"]


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
    assert_close_to_magnitude(result.inputs[0].attribution, _oracle_saliency(MLP), 1e-5)
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


def test_attribution_panel_image_heatmap_and_token_bars(qtbot, window, attr, tmp_path):
    # an image input: the heatmap over the image, one tooltip per pixel naming its value
    from PySide6.QtWidgets import QDockWidget

    cnn = SAMPLES / "cnn.py"
    open_and_wait(qtbot, window, cnn)
    dock = next(d for d in window.findChildren(QDockWidget) if d.widget() is attr)
    before = dock.height()
    result = _run(qtbot, attr, "grad-x-input")
    # the dock grew to show the whole figure (it opened a quarter of the window high)
    qtbot.waitUntil(lambda: attr.scroll.viewport().height() >= attr.figure.height(), timeout=WAIT_MS)
    assert dock.height() > before and dock.height() <= window.height() // 2
    (img,) = result.inputs
    assert img.kind == "image" and img.attribution.shape[1:] == (1, 8, 8)
    attr.example.setValue(3)
    attr.figure.repaint()
    pixels = [h for h in attr.figure.hits if h.text.startswith("attribution [")]
    assert len(pixels) == 64
    heat = img.attribution[3].sum(axis=0)
    assert pixels[10].text == f"attribution [1, 2]: {heat[1, 2]:.4g}"
    # a user-given baseline: a .npy file shaped like the input (here the input itself: nothing to attribute)
    base = tmp_path / "same.npy"
    np.save(base, np.stack([img.values]).squeeze(0).astype(np.float32))
    attr.baseline.setCurrentText(str(base))
    ig = _run(qtbot, attr, "ig", steps=4)
    assert ig.baseline == "given tensors" and np.all(ig.inputs[0].attribution == 0)
    assert ig.completeness.output_delta == 0 and "Completeness holds" in attr.status.text()
    attr.baseline.setCurrentText("zeros")
    # token ids: one bar per position, the tooltip names the token id at that position
    open_and_wait(qtbot, window, TRANSFORMER)
    tokens = _run(qtbot, attr, "ig", target="label", steps=8)
    attr.example.setValue(2)
    attr.figure.repaint()
    bars = [h.text for h in attr.figure.hits if h.text.startswith("position ")]
    ids = tokens.inputs[0].values[2]
    assert len(bars) == ids.size
    assert bars[5] == f"position 5, token id {int(ids[5])}: {tokens.inputs[0].attribution[2, 5]:.4g}"


def test_attribution_panel_float_sequence_bars(qtbot, window, attr, tmp_path):
    # (batch, time, features) through torch's GRU, which reads only the last 4 of 9 steps:
    # one bar per position, zero on the first five
    from test_attribution_models import GRU

    path = tmp_path / "gru.py"
    path.write_text(GRU)
    open_and_wait(qtbot, window, path)
    result = _run(qtbot, attr, "ig", target="pred", steps=16)
    (seq,) = result.inputs
    assert seq.kind == "sequence" and result.completeness.ok
    attr.example.setValue(1)
    attr.figure.repaint()
    bars = [h.text for h in attr.figure.hits if h.text.startswith("position ")]
    per_position = seq.attribution[1].sum(axis=-1)
    assert bars == [f"position {t}: {v:.4g}" for t, v in enumerate(per_position)]
    assert all(v == 0 for v in per_position[:5]) and all(v != 0 for v in per_position[5:])


def test_attribution_needs_a_script(qtbot, window, attr):
    assert attr.run() is None and "Open a model script" in attr.status.text()
    open_and_wait(qtbot, window, MLP)
    attr.baseline.setCurrentText("middle")
    assert attr.run() is None and "baseline" in attr.status.text()
    attr.baseline.setCurrentText(__file__)          # a file, but not tensors: the job says why
    attr.method.setCurrentIndex(attr.method.findData("ig"))
    attr.run()
    qtbot.waitUntil(lambda: "could not run" in attr.status.text(), timeout=WAIT_MS)
    assert "cannot read the baseline file" in attr.status.text()


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


def test_shape_mismatch_forward_in_the_window(qtbot, window):
    # matmul of (3, 3) by (5, 5) in the user's forward: the graph up to it, the call red, its input
    # shapes on the box, the error and file:line in the note under it, the Errors panel still open
    from gradviz.app import failing_forward
    from gradviz.render.scene.graph_marks import FailureNote

    part = failing_forward.install(window)      # held: a part nobody holds is garbage-collected
    path = SAMPLES.parent / "tests" / "scripts" / "bad_forward.py"
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(path)
    doc, scene = window.document, window.scene
    assert doc.status == "failed" and doc.graph.nodes["failed"]["op"] == "matmul"
    i = scene.index["failed"]
    assert scene.fill_colors[i] == scene.theme.color("broken")
    assert scene.text_lines(i)[1] == "3×3 · 5×5"
    (note,) = [it for it in scene.items() if isinstance(it, FailureNote)]
    text = " ".join(note.lines)
    assert "cannot be multiplied (3x3 and 5x5)" in text and "at bad_forward.py:10: return self.fc(x) @" in text
    assert {"op:0", "param:fc.weight", "input:0"} <= set(scene.index)        # what ran before it
    assert not window.error_dock.isHidden()
    window.select_nodes(["failed"])
    assert window.inspector.node_id == "failed" and part.job.outcome == "done"


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
    from gradviz.core.record.compare_view import scale_range
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
    # the ratios' own colour map, from ÷limit to ×limit, its two ends kept for vanished and appeared gradients
    assert ratio.color_scale().cmap is not None
    assert (ratio.color_scale().lo, ratio.color_scale().hi) == scale_range(panel.result.views.limit)
    assert ratio.color_scale().hi > panel.result.views.limit
    i = ratio.index["param:encoder.0.weight"]
    red = ratio.fill_colors[i]
    assert red.red() > 3 * max(red.green(), red.blue())       # appeared: the scale's red end (its own, dark colour)
    grown = [ratio.fill_colors[ratio.index[n]] for n in ratio.index if n.startswith("param:")]
    assert sum(c == red for c in grown) <= 4                  # the four parameters that appeared, no finite ratio
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


def test_compare_two_steps_of_the_open_run(qtbot, window, tmp_path):
    # a run open in the window: A and B start as its first and last step; the numbers are the
    # recorded ones, the nodes matched by id, and the ratio view colours each box by B/A
    from gradviz.app import compare, runs
    from gradviz.app.runs import open_run_file
    from gradviz.core.record.reader import open_run
    from test_compare import record

    path = record(tmp_path / "run.gvrun", steps=12, every=5)
    run_panel = runs.install(window)
    try:
        panel = compare.install(window)["panel"]
        assert open_run_file(window, run_panel, path)
        assert panel.side_a.text().endswith("run.gvrun@first") and panel.side_b.text().endswith("run.gvrun@last")
        from PySide6.QtWidgets import QDockWidget

        dock = next(d for d in window.findChildren(QDockWidget) if d.widget().isAncestorOf(panel))
        dock.show()
        dock.raise_()
        before = dock.height()
        with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
            panel.run()
        # two drawings side by side: the dock grows (to 60 % of the window at most)
        qtbot.waitUntil(lambda: dock.height() > before, timeout=WAIT_MS)
        assert dock.height() <= int(window.height() * 0.6) + 1
        c = panel.result.comparison
        assert c.matched_by == "id" and (c.a.step, c.b.step) == (0, 11)
        with open_run(path) as r:
            row0, row11 = r.step_row(0), r.step_row(11)
            expected = {n: row11["grad_norms"][i] / row0["grad_norms"][i] for i, n in enumerate(r.param_names)}
        assert panel.params_table.rowCount() == len(expected) == 6
        for row in range(panel.params_table.rowCount()):
            name = panel.params_table.item(row, 0).data(0x0100)          # Qt.UserRole
            change = next(ch for ch in c.params if ch.name == name)
            assert change.ratio == pytest.approx(expected[name])
        # the drawings show the sampled node norms nearest those steps (0 and 10), as their titles say
        assert (c.a.node_step, c.b.node_step) == (0, 10)
        assert panel.titles["b"].text().endswith("step 10 (node norms)")
        assert "step 10 of B over step 0 of A" in panel.titles["ratio"].text()
        assert "node norms sampled at steps 0 (A) and 10 (B)" in panel.status.text()
        ratio, views = panel.scenes["ratio"], panel.result.views
        with open_run(path) as r:
            _, nodes0 = r.node_norms(0)
            _, nodes10 = r.node_norms(10)
        coloured = 0
        for name in expected:
            pid = f"param:{name}"
            a, b = nodes0[pid], nodes10[pid]
            assert views.ratio.nodes[pid]["norm_ratio"] == pytest.approx(b / a)
            fill = ratio.fill_colors[ratio.index[pid]]
            if b / a > 1.2:
                assert fill.red() > fill.blue(), name           # grew: the red side
                coloured += 1
            elif b / a < 1 / 1.2:
                assert fill.blue() > fill.red(), name           # shrank: the blue side
                coloured += 1
        assert coloured > 0
        assert panel.nodes_table.rowCount() == len(c.nodes) > 0
    finally:
        run_panel.shutdown()
