"""What you see is what you export: an export of the window reproduces its scene's state
(the live step's values and colours, the colour range, collapsed and expanded modules,
frames, diagnosis marks with a legend entry each) and its header states that state."""
from __future__ import annotations

import gradviz
from test_app_support import MLP, SAMPLES, change_view, open_and_wait

PAD = 24.0
BROKEN_RGB = (0xDC, 0x26, 0x26)  # the light theme's cut-edge red (and the NaN-origin badge)


def export(win, path, what="whole graph", scale=1.0):
    from gradviz.app.export_dialog import export_view
    from gradviz.render.export.formats import ImageOptions

    return export_view(win.view, path, what, ImageOptions(scale=scale))


def page_of(win, what="whole graph"):
    from gradviz.app.export_dialog import CURRENT_VIEW, visible_region
    from gradviz.render.export.image_export import make_page

    return make_page(win.scene, visible_region(win.view) if what == CURRENT_VIEW else None)


def box_fraction(image, page, rect, rgb, scale=1.0, tol=3) -> float:
    """Fraction of the pixels inside ``rect`` (a scene rect, inset 4 px) that have colour ``rgb``."""
    src = page.source
    x0 = int((rect.left() + 4 - src.left() + PAD) * scale)
    y0 = int((rect.top() + 4 - src.top() + PAD + page.legend_h) * scale)
    x1 = int((rect.right() - 4 - src.left() + PAD) * scale)
    y1 = int((rect.bottom() - 4 - src.top() + PAD + page.legend_h) * scale)
    hit = total = 0
    for y in range(y0, y1):
        for x in range(x0, x1):
            c = image.pixelColor(x, y)
            total += 1
            hit += abs(c.red() - rgb[0]) <= tol and abs(c.green() - rgb[1]) <= tol and abs(c.blue() - rgb[2]) <= tol
    return hit / max(total, 1)


def count_rgb(image, rgb, top=0, tol=6) -> int:
    n = 0
    for y in range(top, image.height(), 2):
        for x in range(0, image.width(), 2):
            c = image.pixelColor(x, y)
            n += abs(c.red() - rgb[0]) <= tol and abs(c.green() - rgb[1]) <= tol and abs(c.blue() - rgb[2]) <= tol
    return n


def test_export_draws_the_live_step_with_its_colours_and_says_which(qtbot, window, tmp_path):
    from PySide6.QtGui import QImage

    win = window
    open_and_wait(qtbot, win, MLP)
    scene, view = win.scene, win.document.view
    traced = {n: a.get("grad_norm") for n, a in view.nodes(data=True)}
    # "training" made every gradient 1000x larger at step 41; the loss row came from step 42
    live = {n: v * 1000.0 for n, v in traced.items() if v}
    win.document.set_norms(live, 41, "training")     # as the Training panel does
    win.document.set_loss(0.0123, 42)
    result = export(win, tmp_path / "live.png")
    image = QImage(str(result.path))
    page = page_of(win)
    assert (image.width(), image.height()) == (round(page.width), round(page.height))
    scale = scene.color_scale()
    checked = 0
    for nid, value in live.items():
        i = scene.index[nid]
        if not scene.reachable[i] or scene.kinds[i] == "loss":
            continue
        want = tuple(scale.color(value))
        assert (scene.fill_colors[i].red(), scene.fill_colors[i].green(), scene.fill_colors[i].blue()) == want
        assert box_fraction(image, page, scene.rects[i], want) > 0.3, nid   # drawn with the live colour
        stale = tuple(scale.color(traced[nid]))
        if max(abs(a - b) for a, b in zip(stale, want)) > 20:
            assert box_fraction(image, page, scene.rects[i], stale) < 0.05, nid  # not the traced one
        checked += 1
    assert checked >= 10
    assert page.title == "mlp_digits.py"
    assert page.subtitle.startswith("training step 41 · loss 0.0123 at step 42 · 18 nodes")
    assert "collapsed" not in page.subtitle and "step 0" not in page.subtitle
    svg = export(win, tmp_path / "live.svg").path.read_text()
    assert "training step 41 · loss 0.0123 at step 42" in svg
    assert "loss 2.357" not in svg and "traced" not in svg


def test_export_keeps_collapsed_modules_frames_and_the_fixed_range(qtbot, window, tmp_path):
    from PySide6.QtGui import QImage

    win = window
    open_and_wait(qtbot, win, MLP)
    change_view(qtbot, win, lambda: win.collapse("fc1"))
    scene = win.scene
    assert "group:fc1" in scene.index
    lo, hi = win.color_range()
    win.set_color_range(lo * 10, hi * 10)
    page = page_of(win)
    assert "18" not in page.subtitle.split(" · ")[1]   # fewer boxes than the 18 nodes
    assert f"{len(scene.ids)} nodes" in page.subtitle and "1 module collapsed into boxes" in page.subtitle
    assert page.fixed and page.frames
    image = QImage(str(export(win, tmp_path / "c.png").path))
    i = scene.index["group:fc1"]
    fill = scene.fill_colors[i]
    assert box_fraction(image, page, scene.rects[i].adjusted(0, 30, 0, 0), (fill.red(), fill.green(), fill.blue())) > 0.3
    svg = export(win, tmp_path / "c.svg").path.read_text()
    assert "gradient norm (fixed range)" in svg
    framed = {f.module for f in scene.frames}
    assert framed == {"fc2", "fc3", "act1", "act2"}           # open modules; fc1 is a box, not a frame
    for f in scene.frames:
        assert f.label in svg
    assert "fc1 · Linear" not in svg


def test_export_draws_diagnosis_marks_with_a_legend_entry_each(qtbot, window, tmp_path):
    from PySide6.QtGui import QImage

    from gradviz.core.output.marks import marks_from_findings

    win = window
    script = SAMPLES / "bugs" / "detach.py"
    marks = marks_from_findings(gradviz.check(script, gradcheck=False))
    assert marks.edges.get("broken"), "the detach sample should have a cut edge"
    open_and_wait(qtbot, win, script)
    clean = export(win, tmp_path / "clean.svg").path.read_text()
    assert "cut edge" not in clean and "where NaN/Inf first appears" not in clean
    win.mark_edges(marks.edges["broken"], "broken")
    win.mark_nodes(["loss"], "nan-origin")
    page = page_of(win)
    # the detach sample's cut branch is part of its graph (views' graph marks): always drawn and explained
    assert page.marks == ["broken", "cut-branch", "nan-origin"]
    assert "1 cut edge · 1 cut branch · 1 NaN origin" in page.subtitle
    svg = export(win, tmp_path / "marked.svg").path.read_text()
    assert "cut edge: no gradient flows back along it" in svg and "where NaN/Inf first appears" in svg
    png = QImage(str(export(win, tmp_path / "marked.png").path))
    top = round(PAD + page.legend_h)
    red = count_rgb(png, BROKEN_RGB, top)
    assert red > 40                                   # the dashed red edge and the badge, in the graph area
    # a badge scales with the picture: 16 px across at 1x, 32 px in a 2x PNG (not 16 again)
    big = QImage(str(export(win, tmp_path / "marked2.png", scale=2.0).path))
    corner = win.scene.rects[win.scene.index["loss"]].topRight()
    cx = round(2 * (corner.x() - page.source.left() + PAD))
    cy = round(2 * (corner.y() - page.source.top() + PAD + page.legend_h))
    badge = sum(1 for x in range(cx - 24, cx + 24) for y in range(cy - 24, cy + 24)
                if abs(big.pixelColor(x, y).red() - 0xDC) < 8 and big.pixelColor(x, y).green() < 60)
    assert 450 < badge < 900, badge
    # the window's own legend explains them too
    assert win.overlays.legend._marks == ["broken", "cut-branch", "nan-origin"]


def test_a_new_script_clears_the_marks_from_the_export(qtbot, window, tmp_path):
    win = window
    open_and_wait(qtbot, win, SAMPLES / "bugs" / "detach.py")
    win.mark_nodes(["loss"], "nan-origin")
    assert page_of(win).marks == ["cut-branch", "nan-origin"]     # (its cut branch: a graph mark)
    open_and_wait(qtbot, win, MLP)
    page = page_of(win)
    assert page.marks == [] and "NaN origin" not in page.subtitle
    assert page.subtitle.startswith("traced step 0 · loss 2.357")


def test_current_view_exports_the_part_in_the_window(qtbot, window, tmp_path):
    from PySide6.QtGui import QImage

    win = window
    open_and_wait(qtbot, win, MLP)
    win.view.resetTransform()
    win.view.scale(2.0, 2.0)
    item = win.scene.node_item("loss")
    win.view.centerOn(item)
    qtbot.wait(20)
    whole, current = page_of(win), page_of(win, "current view")
    assert current.source.height() < whole.source.height() * 0.7
    assert current.subtitle.endswith("current view")
    image = QImage(str(export(win, tmp_path / "view.png", "current view").path))
    assert (image.width(), image.height()) == (round(current.width), round(current.height))
    i = win.scene.index["loss"]
    fill = win.scene.fill_colors[i]
    assert box_fraction(image, current, win.scene.rects[i].adjusted(14, 10, -14, -10),
                        (fill.red(), fill.green(), fill.blue())) > 0.3


def test_selection_and_hover_highlight_are_not_exported(qtbot, window, tmp_path):
    from PySide6.QtGui import QImage

    win = window
    open_and_wait(qtbot, win, MLP)
    before = QImage(str(export(win, tmp_path / "a.png").path))
    win.select_nodes(["loss"], center=False)
    win.scene.highlight({"loss"}, [])
    after = QImage(str(export(win, tmp_path / "b.png").path))
    assert before == after
    assert win.scene.selected and win.scene.dimmed_nodes() is not None   # the window keeps them


def test_train_then_export_then_open_another_script(qtbot, window, tmp_path):
    """A user's sequence: train, stop, export (the step the colours and the loss come from, counted
    like the Training panel: steps done); open another script and export again (its traced state,
    nothing left from training)."""
    from gradviz.core.runtime.formatting import number

    from gradviz.app.training import install

    win = window
    panel = win.training_panel = install(win)
    panel.actions["show"].trigger()
    open_and_wait(qtbot, win, MLP)
    doc = win.document
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) >= 60 and doc.norms_step is not None, timeout=120_000)
    panel.stop()
    assert panel.worker.wait(10_000)
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=5_000)
    qtbot.waitUntil(lambda: len(panel.history) == panel.worker.step_index, timeout=5_000)
    # the model training stopped at is measured (its probe arrives after the last rows)
    qtbot.waitUntil(lambda: doc.step == doc.model_step == panel.worker.step_index, timeout=10_000)
    assert doc.norms_source == "training"
    assert doc.loss_step == int(panel.history.column("step")[-1]) + 1      # what the panel's label says
    page = page_of(win)
    want = f"training step {number(doc.norms_step, grouped=True)} · loss {number(doc.live_loss)}"
    if doc.loss_step != doc.norms_step:
        want += f" at step {number(doc.loss_step, grouped=True)}"
    assert page.subtitle.startswith(want), (page.subtitle, want)
    assert "traced" not in page.subtitle and "2.357" not in page.subtitle
    i = win.scene.index["param:fc1.weight"]
    assert win.scene.norms[i] == doc.norms["param:fc1.weight"]             # the colours are that step's
    assert want in export(win, tmp_path / "trained.svg").path.read_text()
    open_and_wait(qtbot, win, SAMPLES / "bugs" / "detach.py")
    page = page_of(win)
    assert page.title == "detach.py" and page.subtitle.startswith("traced step 0 · loss ")
    assert "training" not in page.subtitle
    panel.shutdown()
