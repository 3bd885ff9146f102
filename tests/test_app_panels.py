"""Window parts: recent files, the script watcher, extensions, errors, the Modules outline."""
from __future__ import annotations

import sys
import types

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMenu

from test_app_support import MLP, open_and_wait


def test_recent_files_survive_restart_and_drop_missing(qtbot, tmp_path):
    from gradviz.app.recent_files import MAX_RECENT, RecentFiles

    ini = str(tmp_path / "s.ini")
    files = []
    for i in range(MAX_RECENT + 2):
        f = tmp_path / f"m{i}.py"
        f.write_text("")
        files.append(f)
    menu = QMenu()
    recent = RecentFiles(menu, QSettings(ini, QSettings.IniFormat))
    for f in files:
        recent.add(f)
    assert len(recent.paths()) == MAX_RECENT and recent.paths()[0] == str(files[-1])
    files[-1].unlink()
    again = RecentFiles(QMenu(), QSettings(ini, QSettings.IniFormat))   # a "restart"
    assert again.paths()[0] == str(files[-2])
    assert str(files[-1]) not in again.paths()


def test_script_change_on_disk_offers_reload(qtbot, window, tmp_path):
    script = tmp_path / "m.py"
    script.write_text(MLP.read_text().replace("import _digits", f"import sys; sys.path.insert(0, {str(MLP.parent)!r})\nimport _digits"))
    open_and_wait(qtbot, window, script)
    assert not window.reload_bar.isVisible()
    with qtbot.waitSignal(window.watcher.changed, timeout=10000):
        script.write_text(script.read_text() + "\n# edited\n")
    assert window.reload_bar.isVisible() and "m.py" in window.reload_bar.label.text()
    with qtbot.waitSignal(window.graphShown, timeout=60000):
        window.reload_bar.reload.emit()
    assert not window.reload_bar.isVisible()


def test_extensions_missing_or_broken_are_reported(qtbot, window, monkeypatch):
    from gradviz.app.extensions import load_extensions

    good = types.ModuleType("gv_ext_good")
    good.install = lambda win: win.add_dock("Good", __import__("PySide6.QtWidgets").QtWidgets.QLabel("hi"))
    monkeypatch.setitem(sys.modules, "gv_ext_good", good)
    bad = types.ModuleType("gv_ext_bad")

    def boom(win):
        import gv_no_such_dependency  # noqa: F401

    bad.install = boom
    monkeypatch.setitem(sys.modules, "gv_ext_bad", bad)
    installed, failed = load_extensions(window, {"missing": "gv_ext_missing", "good": "gv_ext_good",
                                                 "bad": "gv_ext_bad"})
    assert list(installed) == ["good"] and installed["good"].windowTitle() == "Good"
    # every extension is part of gradviz: a missing one is a bug too, reported, never skipped
    assert [name for name, _ in failed] == ["missing", "bad"]
    assert "gv_ext_missing" in failed[0][1] and "gv_no_such_dependency" in failed[1][1]
    assert any(d.windowTitle() == "Good" for d in window.docks.docks)


def test_excepthook_routes_to_error_panel(qtbot, window):
    from gradviz.app.error_panel import ExceptHook

    hook = ExceptHook(window)
    hook.caught.connect(lambda exc, text: window.show_error(exc, details=text, title="Unexpected error"))
    try:
        raise RuntimeError("boom in a slot")
    except RuntimeError:
        hook._hook(*sys.exc_info())
    assert window.error_dock.isVisible()
    assert "boom in a slot" in window.errors.message.text()
    assert window.errors.title.text() == "Unexpected error"


def test_contract_methods_without_graph_and_with(qtbot, window):
    window.select_nodes(["param:nope"])
    window.set_node_norms({"op:0": 1.0})
    window.mark_edges([("a", "b")])
    assert window.current_script() is None
    open_and_wait(qtbot, window, MLP)
    seen = []
    window.nodeSelected.connect(seen.append)
    window.select_nodes(["param:fc1.weight"])
    assert seen == ["param:fc1.weight"]
    window.set_node_norms({"param:fc1.weight": 123.0})
    i = window.scene.index["param:fc1.weight"]
    assert window.scene.norms[i] == 123.0
    window.mark_nodes(["op:2"], "nan-origin")
    window.mark_edges([("param:fc1.weight", next(iter(window.document.view.successors("param:fc1.weight"))))])


def test_outline_shows_largest_op_gradient_for_modules_without_parameters(qtbot, window):
    from gradviz.app.formatting import num, short_num
    from gradviz.app.outline_panel import THROUGH_TIP

    open_and_wait(qtbot, window, MLP)
    graph = window.document.graph
    outline = window.outline

    def norm_item(path):
        first = outline.item(path)
        return outline.model.itemFromIndex(first.index().siblingAtColumn(3))

    for path in ("act1", "act2"):
        ops = [a["grad_norm"] for _, a in graph.nodes(data=True)
               if a["kind"] == "op" and a["module"] == path and a["grad_norm"] is not None]
        assert ops, path
        item = norm_item(path)
        assert item.text() == short_num(max(ops)) != "—"
        assert item.font().italic() and item.toolTip() == f"{num(max(ops))}: {THROUGH_TIP}"
        assert item.data(Qt.DecorationRole) is not None      # coloured like the others
    fc1 = norm_item("fc1")                                   # parameters: their norm, upright
    fc1_norm = graph.graph["modules"]["fc1"]["grad_norm"]
    assert fc1.text() == short_num(fc1_norm)
    assert not fc1.font().italic() and fc1.toolTip() == num(fc1_norm)     # the full value on hover


def test_short_numbers_fit_a_narrow_column():
    from gradviz.app.formatting import num, short_num

    cases = {0.012345: "0.01235", 0.0003616: "3.62e-4", 3.324: "3.324", 36864.0: "3.69e4",
             -123456.0: "-1.23e5", 2.5e-7: "2.5e-7", 0.0: "0", None: "—", float("nan"): "NaN"}
    for value, text in cases.items():
        assert short_num(value) == text, value
        assert len(text) <= 8
        if value is not None and text not in ("NaN", "—"):
            assert abs(float(text) - value) <= 0.005 * abs(value)       # what it says is the value
    assert short_num(float("inf")) == num(float("inf"))


def test_outline_rebuilt_for_a_second_graph_filters_and_toggles_on_the_new_rows(qtbot):
    """set_modules builds the rows off-view and hands the proxy the new model: the filter, the tree
    and the expand check boxes must all work on it, and nothing of the first graph may stay."""
    from gradviz.app.outline_panel import OutlinePanel

    panel = OutlinePanel()
    qtbot.addWidget(panel)
    first = {"": {"parent": None, "type": "Net"}, "enc": {"parent": "", "type": "Linear", "nodes": 3, "numel": 12}}
    second = {"": {"parent": None, "type": "Other"}, "dec": {"parent": "", "type": "Conv2d", "nodes": 2, "numel": 5},
              "dec.inner": {"parent": "dec", "type": "ReLU", "nodes": 1}}
    panel.set_modules(first, set())
    panel.set_modules(second, {"dec"})
    assert panel.item("enc") is None and panel.item("dec") is not None
    assert panel.proxy.sourceModel() is panel.model
    assert panel.model.rowCount() == 1 and panel.model.item(0).text() == "(model)"
    panel.filter.setText("inner")
    root = panel.proxy.index(0, 0)
    dec = panel.proxy.index(0, 0, root)
    assert dec.data() == "dec" and panel.proxy.index(0, 0, dec).data() == "inner"
    toggled = []
    panel.expandToggled.connect(lambda path, on: toggled.append((path, on)))
    panel.item("dec.inner").setCheckState(Qt.Checked)
    assert toggled == [("dec.inner", True)]


def test_inspector_histogram_loads_pyqtgraph_only_when_there_is_one(tmp_path):
    """pyqtgraph (0.3 s to import) is not on the way from launch to the first graph: the inspector's
    histogram makes its plot when a node with a histogram is shown."""
    code = """
import sys
from gradviz.render.primitives.qtcompat import ensure_app
app = ensure_app()
from gradviz.app.inspector_panel import InspectorPanel
panel = InspectorPanel()
panel.show_node("op:1", {"kind": "op", "label": "mm", "grad_norm": 1.0})
assert "pyqtgraph" not in sys.modules, "pyqtgraph loaded with no histogram to show"
assert not panel.histogram.isVisibleTo(panel)
hist = {"edges": [0.0, 1.0, 2.0], "counts": [3, 4]}
panel.show_node("op:1", {"kind": "op", "label": "mm", "grad_norm": 1.0, "grad_hist": hist})
assert "pyqtgraph" in sys.modules and panel.histogram.isVisibleTo(panel)
x, y = panel.histogram.data()
assert list(x) == [0.0, 1.0, 2.0] and list(y) == [3.0, 4.0]
print("ok")
"""
    import os
    import subprocess
    import sys

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
