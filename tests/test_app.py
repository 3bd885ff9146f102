"""The desktop window, driven like a user would (pytest-qt, offscreen Qt).

Gradients shown in the inspector are checked against plain torch (the oracle), built
with the same seed the trace uses (``TraceOptions.seed``).
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
import time

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer

from test_app_support import MLP, ROOT, TRANSFORMER, WAIT_MS, change_view, open_and_wait, oracle_grads


def click_node(qtbot, win, nid, double=False):
    item = win.scene.node_item(nid)
    assert item is not None, nid
    win.view.centerOn(item)
    pos = win.view.mapFromScene(item.sceneBoundingRect().center())
    if double:
        qtbot.mouseDClick(win.view.viewport(), Qt.LeftButton, pos=pos)
    else:
        qtbot.mouseClick(win.view.viewport(), Qt.LeftButton, pos=pos)


def test_opens_sample_and_shows_graph(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    assert window.windowTitle() == "mlp_digits.py"   # the platform adds " — gradviz" once
    assert doc.graph.number_of_nodes() == 18
    assert "param:fc1.weight" in doc.view
    assert window.scene.node_item("loss") is not None
    assert "18 nodes" in window.status.size_label.text()
    assert window.current_script() == str(MLP.resolve())
    assert not window.is_busy()
    # the outline lists the module tree with parameter counts
    item = window.outline.item("fc1")
    assert item is not None and item.text() == "fc1"


def test_clicking_a_parameter_shows_its_gradient_norm(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    grads = oracle_grads(MLP)
    with qtbot.waitSignal(window.nodeSelected, timeout=5000) as sel:
        click_node(qtbot, window, "param:fc2.weight")
    assert sel.args == ["param:fc2.weight"]
    expected = grads["fc2.weight"].double().norm().item()
    shown = window.document.node("param:fc2.weight")["grad_norm"]
    assert math.isclose(shown, expected, rel_tol=1e-5)
    assert window.inspector.field("grad norm") == "%.4g" % expected
    # the window traces exact norms only; the rest of the selected node's statistics follow
    # from a replay off the UI thread (app/details_fetcher.py)
    assert window.inspector.field("details") == "computing…"
    qtbot.waitUntil(lambda: window.inspector.field("grad max") != "—", timeout=30000)
    assert window.inspector.field("details") is None
    g = grads["fc2.weight"].double()
    assert window.inspector.field("grad max") == "%.4g" % g.max().item()
    assert window.inspector.field("grad min") == "%.4g" % g.min().item()
    assert window.inspector.field("module") == "fc2  [Linear]"
    assert window.inspector.histogram.isVisibleTo(window.inspector)
    # a parameter highlights its paths to the loss: fc2.weight -> t -> addmm -> ... -> loss
    scene = window.scene
    highlighted = {scene.ids[i] for i in scene.hl_nodes}
    assert "loss" in highlighted and "param:fc2.weight" in highlighted
    assert "param:fc1.weight" not in highlighted


def test_selecting_an_op_highlights_its_neighbours(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    view = window.document.view
    op = next(n for n, a in view.nodes(data=True) if a.get("label") == "relu")
    window.select_nodes([op], center=True)
    highlighted = {window.scene.ids[i] for i in window.scene.hl_nodes}
    assert highlighted == {op, *view.predecessors(op), *view.successors(op)}
    assert window.inspector.field("op") == "ReluBackward0"
    assert "mlp_digits.py:" in window.inspector.source.location()
    # arrow keys walk the graph: Down goes to the consumer, Up back to the producer
    window.view.setFocus()
    qtbot.keyClick(window.view, Qt.Key_Down)
    assert window.selected == next(iter(view.successors(op)))
    qtbot.keyClick(window.view, Qt.Key_Up)
    assert window.selected == op
    with qtbot.waitSignal(window.nodeSelected, timeout=2000) as sel:
        qtbot.mouseClick(window.view.viewport(), Qt.LeftButton, pos=QPoint(5, 5))
    assert sel.args == [""] and window.inspector.node_id == ""


def test_expand_and_collapse_modules(qtbot, window):
    open_and_wait(qtbot, window, TRANSFORMER)
    doc = window.document
    from gradviz.core.layout.grouping import auto_depth, expanded_to_depth

    change_view(qtbot, window, lambda: window.set_expanded(expanded_to_depth(doc.graph, auto_depth(doc.graph))))
    assert "group:blocks.0.attn.q_proj" in doc.view  # auto depth: Linear layers are boxes
    before, auto = doc.view.number_of_nodes(), set(doc.expanded)
    assert window.outline.item("blocks.0.attn").checkState() == Qt.Checked
    # the user unchecks blocks.0 in the module tree (#12 item 11: its children were left checked)
    change_view(qtbot, window, lambda: window.outline.item("blocks.0").setCheckState(Qt.Unchecked))
    assert "group:blocks.0" in doc.view
    assert not any(n.startswith("group:blocks.0.") for n in doc.view)
    assert doc.view.number_of_nodes() < before
    assert window.scene.node_item("group:blocks.0") is not None
    assert window.selected == "group:blocks.0"
    # a folded module holds nothing open: its inner modules' check boxes are cleared too (#12 item 11)
    assert window.outline.item("blocks.0").checkState() == Qt.Unchecked
    assert window.outline.item("blocks.0.attn").checkState() == Qt.Unchecked
    assert not any(m.startswith("blocks.0") for m in doc.expanded)
    # double-click the group to expand it again: its attention and MLP show as boxes
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        click_node(qtbot, window, "group:blocks.0", double=True)
    assert "group:blocks.0" not in doc.view and "group:blocks.0.attn" in doc.view
    change_view(qtbot, window, lambda: window.outline.item("blocks.0.attn").setCheckState(Qt.Checked))
    assert "group:blocks.0.attn" not in doc.view and "group:blocks.0.attn.q_proj" in doc.view
    change_view(qtbot, window, lambda: window.set_expanded(auto))
    assert doc.view.number_of_nodes() == before
    # the outline's check box expands a module: every op of q_proj shows
    change_view(qtbot, window, lambda: window.outline.item("blocks.0.attn.q_proj").setCheckState(Qt.Checked))
    assert "group:blocks.0.attn.q_proj" not in doc.view
    assert "param:blocks.0.attn.q_proj.weight" in doc.view
    n_items = len(window.scene.ids)
    assert n_items == doc.view.number_of_nodes() > before
    change_view(qtbot, window, window.expand_all)
    assert doc.view.number_of_nodes() == doc.graph.number_of_nodes()


def test_search_finds_and_centres_hits(qtbot, window):
    open_and_wait(qtbot, window, TRANSFORMER)
    window.acts.find.trigger()
    assert window.search.isVisible()
    # a parameter hidden in a collapsed group: the group opens and the hit is centred
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        hits = window.search.search("blocks.2.attn.v_proj.weight")
    assert hits == ["param:blocks.2.attn.v_proj.weight"]
    qtbot.waitUntil(lambda: window.selected == "param:blocks.2.attn.v_proj.weight", timeout=WAIT_MS)
    assert window.search.count.text() == "1 of 1"
    rect = window.scene.node_item(window.selected).sceneBoundingRect()
    assert window.view.visible_scene_rect().contains(rect.center())
    centre = window.view.mapToScene(window.view.viewport().rect().center())
    assert abs(centre.y() - rect.center().y()) < 60   # x may be clamped by the scene's edge
    # several hits: next / previous cycle through them in data-flow order
    hits = window.search.search("softmax")
    assert len(hits) >= 4 and window.search.count.text() == f"1 of {len(hits)}"
    qtbot.waitUntil(lambda: window.selected == window.document.visible_id(hits[0]), timeout=WAIT_MS)
    qtbot.keyClick(window.search.edit, Qt.Key_F3)
    assert window.search.count.text() == f"2 of {len(hits)}"
    qtbot.keyClick(window.search.edit, Qt.Key_Return, Qt.ShiftModifier)
    assert window.search.count.text() == f"1 of {len(hits)}"
    assert window.search.search("no such thing") == [] and window.search.count.text() == "no match"


def test_export_writes_png_svg_pdf(qtbot, window, tmp_path):
    open_and_wait(qtbot, window, MLP)
    png = window.export_to(tmp_path / "g.png", scale=1.0, dpi=96)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PySide6.QtGui import QImage

    img = QImage(str(png))
    assert img.width() > 200 and img.height() > 200
    svg = window.export_to(tmp_path / "g.svg")
    text = svg.read_text()
    assert "<svg" in text and "fc1.weight" in text
    pdf = window.export_to(tmp_path / "g.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left
    with pytest.raises(Exception):
        window.export_to(tmp_path / "missing-folder" / "g.png")
    from gradviz.core.runtime.atomic import ExportError

    with pytest.raises(ExportError, match="unknown extension"):
        window.export_to(tmp_path / "g.bmp")


BROKEN = """\
import torch
from torch import nn

model = lambda: nn.Linear(4, 2)

def batch(step):
    return torch.randn(3, 4), torch.randn(3, 2)

def loss_fn(output, targets):
    return (output - targets.T).pow(2).mean()   # line 10: shapes do not match
"""


def test_script_error_shows_in_panel_then_another_script_opens(qtbot, window, tmp_path):
    open_and_wait(qtbot, window, MLP)
    bad = tmp_path / "broken.py"
    bad.write_text(BROKEN)
    with qtbot.waitSignal(window.traceFailed, timeout=WAIT_MS):
        window.open_script(bad)
    assert window.error_dock.isVisible()
    assert window.errors.location.location() == f"{bad}:10"
    assert "loss_fn raised" in window.errors.message.text()
    assert "Traceback" in window.errors.details.toPlainText()
    assert "targets.T" in window.errors.code.text()
    # nothing of the previous script stays under the new name: one document, failed
    doc = window.document
    assert doc.path == bad.resolve() and doc.status == "failed" and doc.graph is None
    assert window.windowTitle() == "broken.py (could not open)"
    assert window.scene.node_item("param:fc1.weight") is None and not window.scene.ids
    assert window.outline.item("fc1") is None and window.inspector.node_id == ""
    assert not window.is_busy()
    open_and_wait(qtbot, window, TRANSFORMER)
    assert window.document.path == TRANSFORMER.resolve()
    assert not window.error_dock.isVisible()


def test_event_loop_keeps_running_while_tracing(qtbot, window, tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text(MLP.read_text().replace("def batch(step: int):\n",
                                            "def batch(step: int):\n    import time; time.sleep(1.5)\n"))
    (tmp_path / "_digits.py").write_text((MLP.parent / "_digits.py").read_text())
    import shutil

    shutil.copytree(MLP.parent / "data", tmp_path / "data")
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(20)
    with qtbot.waitSignal(window.busyChanged, timeout=5000):
        window.open_script(slow)
    assert window.is_busy() and window.status.busy.isVisible()
    t0 = time.perf_counter()
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        pass
    timer.stop()
    elapsed = time.perf_counter() - t0
    assert elapsed > 1.0
    during = [t for t in ticks if t >= t0]
    assert len(during) >= elapsed / 0.02 * 0.4   # the UI thread kept turning
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert max(gaps) < 0.5


def test_newer_request_supersedes_older(qtbot, window):
    shown = []
    window.graphShown.connect(lambda: shown.append(window.document.path))
    window.open_script(TRANSFORMER)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(MLP)
    qtbot.wait(300)
    assert shown == [MLP.resolve()]


def test_screenshot_cli_writes_a_png(tmp_path):
    out = tmp_path / "shot.png"
    code = ("import sys; from gradviz.cli.main import main; "
            f"sys.exit(main(['-v', {str(MLP)!r}, '--screenshot', {str(out)!r}, '--size', '1200x800']))")
    env = {**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    # with -v the window says when the graph was on screen (bench_scale reads this line)
    assert re.search(r"graph on screen \d+\.\d\d s after launch \(\d+\.\d\d s CPU\)", proc.stderr), proc.stderr
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert (img.width(), img.height()) == (1200, 800)
    colors = {img.pixel(x, y) for x in range(0, img.width(), 23) for y in range(0, img.height(), 23)}
    assert len(colors) > 20   # not blank


def test_screenshot_of_a_broken_script_fails_cleanly(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text(BROKEN)
    out = tmp_path / "shot.png"
    code = ("import sys; from gradviz.cli.main import main; "
            f"sys.exit(main([{str(bad)!r}, '--screenshot', {str(out)!r}]))")
    env = {**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 1
    assert "broken.py:10" in proc.stderr
    assert not out.exists()
