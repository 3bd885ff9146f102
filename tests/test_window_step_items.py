"""#27's smaller items, each on the real window: the cut edge starts at the cut op, a finding's
click brightens its cut point, overlays step aside from the selection, Compare fits 1024x700,
another document shows nothing of the last one's training, Recent holds only what opened,
the loss node names its step, the sparkline's labels read first → last, zeros as a percentage."""
from __future__ import annotations

import pytest

from test_app_support import MLP, SAMPLES, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)

BUGS = SAMPLES / "bugs"


def test_the_cut_edge_starts_at_the_detach_call():
    """Item 5: the red cut edge of detach.py started at encoder.2.bias, not at ``.detach()``."""
    import gradviz
    from gradviz.core.diagnosis import check
    from gradviz.core.output.marks import finding_nodes, marks_from_findings

    graph = gradviz.trace(BUGS / "detach.py")
    cut = graph.graph["cut_branches"][0]
    assert graph.nodes[cut["node"]]["label"] == ".detach()"
    findings = check(BUGS / "detach.py")
    marks = marks_from_findings(findings, graph)
    assert marks.edges["broken"] == [(cut["node"], cut["consumer"])]
    assert marks_from_findings(findings).edges["broken"][0][0].startswith("param:")   # without the graph: as named
    unreachable = next(f.to_dict() for f in findings if f.code == "unreachable")
    assert cut["node"] in finding_nodes(unreachable, graph)


def test_a_findings_click_brightens_its_cut_point_and_overlays_step_aside(qtbot, full):
    """Item 5: clicking the finding dimmed the cut point; the legend and map covered selected nodes."""
    win = full
    open_and_wait(qtbot, win, BUGS / "detach.py")
    panel = win.diagnosis_panels["diagnosis"]
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
        panel.run_check()
    cut = win.document.graph.graph["cut_branches"][0]["node"]
    shown = win.document.visible_id(cut)
    assert shown and (shown, win.document.visible_id("op:2")) in win.scene.marks().edges["broken"]
    panel.activate(0)
    assert shown in win.selection.shown_ids and win.scene.index[shown] not in win.scene.dimmed_nodes()
    # every selected box is clear of the legend and the map (or they fade: the box shows through)
    for nid in win.selection.shown_ids:
        rect = win.view.mapFromScene(win.selection.nodes_rect([nid])).boundingRect()
        rect.translate(win.view.viewport().geometry().topLeft())
        for overlay in (win.legend, win.minimap):
            if overlay.isVisible() and overlay.geometry().intersects(rect):
                assert overlay.faded, f"{overlay.objectName()} covers {nid}"


def test_compare_is_usable_at_1024x700(qtbot, full):
    """Item 5: at 1024x700 Compare's field and button were off-screen."""
    win = full
    win.resize(1024, 700)
    compare = win.extension_parts["compare"]
    compare["action"].trigger()
    qtbot.waitUntil(lambda: compare["panel"].isVisible(), timeout=5000)
    qtbot.wait(50)
    panel = compare["panel"]
    assert (win.width(), win.height()) == (1024, 700)       # the window is no wider than asked
    screen = win.rect()
    for w in (panel.side_a, panel.side_b, panel.compare_button):
        top_left = w.mapTo(win, w.rect().topLeft())
        bottom_right = w.mapTo(win, w.rect().bottomRight())
        assert screen.contains(top_left) and screen.contains(bottom_right), f"{w} is off-screen"
        assert w.width() >= 40 and w.visibleRegion().boundingRect() == w.rect(), f"{w} is cut"


def test_another_document_shows_nothing_of_the_last_ones_training(qtbot, full, tmp_path):
    """Item 3: opening detach.py during the CNN's training showed the CNN's step, loss and accuracy;
    the curves stayed for a failed script and an untrained one. Item 6: failed files joined Recent."""
    win = full
    panel = win.training_panel
    open_and_wait(qtbot, win, MLP)
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) > 20 and panel.acc_label.text() != "", timeout=WAIT_MS)
    bad = tmp_path / "broken.py"
    bad.write_text("def model(:\n")
    win.open_script(bad)                     # while training: the worker is retired, its signals dropped
    qtbot.waitUntil(lambda: win.document.status == "failed", timeout=WAIT_MS)
    qtbot.wait(300)
    for label in (panel.step_label, panel.loss_label):
        assert label.text().endswith("—")
    assert panel.acc_label.text() == "" and len(panel.history) == 0
    assert str(bad) not in win.recent.paths() and str(MLP) in win.recent.paths()
    plots = panel.plots
    # the controls say training stopped (seen under Xvfb: Pause and Stop stayed enabled), no curve is left
    assert panel.state == "stopped" and panel.btn_start.isEnabled() and not panel.btn_pause.isEnabled()
    assert not panel.btn_stop.isEnabled() and not panel.actions["pause"].isEnabled()
    for curve in (plots.loss_curve, plots.loss_smooth, plots.pre_curve, plots.pre_smooth, plots.post_curve):
        assert len(curve.getData()[0] or []) == 0
    (lo, hi), _ = plots.param_plot.viewRange()
    assert lo >= -1 and hi <= 2                      # the x-axis starts at step 0, not -1000 ... 1000
    open_and_wait(qtbot, win, BUGS / "detach.py")     # an untrained script: no curves, no numbers of training
    assert len(plots.loss_curve.getData()[0] or []) == 0 and panel.step_label.text().endswith("—")
    assert win.document.norms_source == "traced" and "traced, step 0" in win.status.step.text()


def test_the_loss_node_and_inspector_name_the_loss_step(qtbot, full):
    """Item 6: the Inspector's loss lagged the loss node and did not name its step."""
    win = full
    open_and_wait(qtbot, win, MLP)
    win.training_panel.train_steps(5)
    qtbot.waitUntil(lambda: win.document.step == 5 and win.training_panel.state == "paused", timeout=WAIT_MS)
    win.select_nodes(["loss"])
    doc = win.document
    assert win.scene.values.loss == doc.live_loss and win.scene.values.loss_step == 5
    assert win.inspector.field("loss value").endswith("(step 5)")
    assert float(win.inspector.field("loss value").split()[0]) == pytest.approx(doc.live_loss, rel=1e-3)
    assert win.training_panel.loss_label.text().endswith("(step 5)")


def test_sparkline_labels_read_first_to_last_and_zeros_are_a_percentage(qtbot, full):
    """Item 4: a curve falling 3134 → 2334 read "2334 … 3134" (min, max). Item 6: zeros 0.2916 (29.2 %)."""
    from gradviz.render.primitives.fold_paint import sparkline_ends

    assert sparkline_ends([3134.0, 2800.0, None, 2334.0]) == ("3134", "→ 2334")
    assert sparkline_ends([1.0, 5.0, 2.0]) == ("1", "→ 2")
    win = full
    open_and_wait(qtbot, win, MLP)
    win.select_nodes(["param:fc1.weight"])
    qtbot.waitUntil(lambda: win.inspector.shown_state == "current", timeout=WAIT_MS)   # details replayed
    text = win.inspector.field("grad zero_frac")
    assert text.split()[1] == "%" and " of " in text             # "29.2 %  (2,391 of 8,192)"
    assert win.inspector.gradient.title().endswith("traced, step 0")


def test_the_training_dock_keeps_its_width_as_the_labels_change(qtbot, full):
    """Item 6: the left dock changed width with the status text, moving the graph."""
    win = full
    panel = win.training_panel
    panel.actions["show"].trigger()
    qtbot.wait(50)
    before = panel.minimumSizeHint().width()
    panel.rate_label.setText("123,456,789 steps/s on a very long device name indeed")
    panel.loss_label.setText("loss 0.000123456789 (step 123,456,789)")
    assert panel.minimumSizeHint().width() <= before
    qtbot.wait(50)
    for label in (panel.step_label, panel.loss_label, panel.rate_label):
        assert label.width() > 40 and label.height() >= label.fontMetrics().height()   # and still readable


def test_the_legend_fits_a_narrow_graph_view(qtbot, full):
    """Seen under Xvfb at 1024x700: the legend's NaN / Inf / no-gradient swatches ran past the
    graph view's right edge. In a narrow view they go under the colour bar."""
    win = full
    win.resize(1024, 700)
    open_and_wait(qtbot, win, MLP)
    qtbot.wait(50)
    win.overlays.place()
    vp = win.view.viewport().geometry()
    assert vp.width() < 600
    assert vp.contains(win.legend.geometry()), (win.legend.geometry(), vp)
    win.resize(1400, 900)                 # wide again: one row
    qtbot.wait(50)
    win.overlays.place()
    assert win.legend.height() < 70


def test_clearing_the_selection_clears_the_module_trees_highlight(qtbot, full):
    """Seen in the unfolded GPT screenshot: the tree kept a module highlighted with nothing selected."""
    win = full
    open_and_wait(qtbot, win, MLP)
    win.outline.select_module("fc1")
    assert win.outline.tree.selectionModel().hasSelection()
    win.select_nodes([])
    assert not win.outline.tree.selectionModel().hasSelection()
