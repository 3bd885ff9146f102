"""#12 item 11, the smaller things: whole type names in the module tree, source lines that
wrap in the inspector instead of being cut, no scroll bar inside the inspector's scroll
area, Run menu actions enabled only when they can act."""
from __future__ import annotations

from PySide6.QtCore import Qt

from test_app_support import MLP, SAMPLES, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)


def test_module_types_are_shown_whole(qtbot, window):
    open_and_wait(qtbot, window, SAMPLES / "cnn.py")
    tree = window.outline.tree
    widest = max(tree.fontMetrics().horizontalAdvance(a["type"]) for a in window.document.modules.values())
    assert tree.header().sectionSize(1) >= widest
    names = max(tree.fontMetrics().horizontalAdvance(p.rpartition(".")[2]) for p in window.document.modules if p)
    assert tree.header().sectionSize(0) >= min(names, 90)                  # module names readable too
    assert any(a["type"] == "BatchNorm2d" for a in window.document.modules.values())


def test_the_gradient_norm_column_is_in_view_in_the_default_dock(qtbot, full):
    """The module tree's reason to be, its gradient norms, is in view next to the names at the
    Modules dock's default width (the type and parameter count may scroll sideways)."""
    from gradviz.app.outline_panel import NORM_COLUMN

    open_and_wait(qtbot, full, SAMPLES / "cnn.py")
    tree = full.outline.tree
    header = tree.header()
    assert header.visualIndex(NORM_COLUMN) == 1
    right = header.sectionViewportPosition(NORM_COLUMN) + header.sectionSize(NORM_COLUMN)
    assert 0 <= header.sectionViewportPosition(NORM_COLUMN) and right <= tree.viewport().width()
    assert full.outline.module_norm_text("stage1.conv1") not in (None, "")


def test_the_inspector_wraps_source_and_has_one_scroll_bar(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    nid, attrs = max(((n, a) for n, a in doc.view.nodes(data=True) if a.get("code")),
                     key=lambda na: len(na[1]["code"]))
    window.select_nodes([nid])
    insp = window.inspector
    code = insp.code
    assert code.text().replace("\u200b", "") == attrs["code"].strip()       # every character, none cut
    assert code.wordWrap() and code.minimumSizeHint().width() < insp.viewport().width()
    assert insp.saved.verticalScrollBarPolicy() == Qt.ScrollBarAlwaysOff
    # a parameter in a narrow, short Inspector: it scrolls down, never sideways (long words such as
    # torch::autograd::AccumulateGrad wrap instead of widening the panel)
    window.resizeDocks([window.inspector_dock], [330], Qt.Horizontal)
    window.resize(window.width(), 560)
    window.select_nodes(["param:fc2.weight"])
    qtbot.waitUntil(lambda: insp.verticalScrollBar().maximum() > 0, timeout=5000)
    assert insp.field("op").replace("\u200b", "") == "torch::autograd::AccumulateGrad"
    assert insp.horizontalScrollBarPolicy() == Qt.ScrollBarAlwaysOff
    assert insp.widget().minimumSizeHint().width() <= insp.viewport().width()
    rows = insp.saved.rowCount()
    if rows:
        needed = sum(insp.saved.rowHeight(r) for r in range(rows)) + insp.saved.horizontalHeader().height()
        assert insp.saved.height() >= needed


def test_run_actions_are_enabled_only_when_they_can_act(qtbot, window):
    from gradviz.app.training import install

    panel = install(window)
    open_and_wait(qtbot, window, MLP)
    acts = panel.actions
    assert acts["start"].isEnabled() and acts["step"].isEnabled()
    assert not acts["pause"].isEnabled() and not acts["resume"].isEnabled() and not acts["stop"].isEnabled()
    panel.start()
    qtbot.waitUntil(lambda: panel.state == "running", timeout=WAIT_MS)
    assert acts["pause"].isEnabled() and acts["stop"].isEnabled() and not acts["start"].isEnabled()
    panel.pause()
    qtbot.waitUntil(lambda: panel.state == "paused", timeout=WAIT_MS)
    assert acts["resume"].isEnabled() and not acts["pause"].isEnabled()
    panel.stop()
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=WAIT_MS)
    assert not acts["pause"].isEnabled() and not acts["stop"].isEnabled() and acts["start"].isEnabled()
    panel.shutdown()


def test_training_settings_fold_and_leave_the_module_tree_its_room(qtbot, full):
    """The Training dock sits under the Modules tree: its settings are folded into one line that says
    what they are, so the tree keeps most of the column; unfolded, every setting is there."""
    win = full
    open_and_wait(qtbot, win, SAMPLES / "cnn.py")
    panel = win.training_panel
    panel.actions["show"].trigger()
    qtbot.wait(50)
    training_dock = next(d for d in win.docks.docks if d.windowTitle() == "Training")
    assert training_dock.isVisible() and not panel.settings.isVisible()
    assert panel.settings_line.text() == "script's optimizer · lr default · constant"
    qtbot.waitUntil(lambda: win.outline.tree.height() >= 0.4 * win.height(), timeout=5000)
    panel.clip.setValue(1.0)
    panel.agc.setValue(0.02)
    assert panel.settings_line.text() == "script's optimizer · lr default · constant · clip 1 · adaptive clip 0.02"
    assert panel.config().max_grad_norm == 1.0 and panel.config().adaptive_clip == 0.02
    panel.settings_toggle.click()
    assert panel.settings.isVisible() and not panel.settings_line.isVisible() and panel.clip.isVisible()
    panel.settings_toggle.click()
    assert not panel.settings.isVisible() and "clip 1" in panel.settings_line.text()
