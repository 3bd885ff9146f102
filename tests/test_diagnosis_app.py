"""The diagnosis panels in the window (pytest-qt, offscreen): findings drive the graph
selection and marks of their own document; the checks run as background jobs and cancel;
every finding's why-and-fix text is in view at the dock's default size."""
from __future__ import annotations

from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
BUGS = SAMPLES / "bugs"
WAIT_MS = 120_000

REPORT = {"script": "x.py", "ok": False, "seconds": 0.5, "findings": [
    {"code": "unreachable", "severity": "error", "message": "`enc.weight` gets no gradient. Remove the detach.",
     "params": ["enc.weight"], "modules": ["enc"], "nodes": ["param:enc.weight", "op:3"],
     "location": "/tmp/x.py:12", "edges": [["param:enc.weight", "op:3"]], "data": {}},
    {"code": "nan", "severity": "error", "message": "The loss is nan.", "params": [], "modules": [],
     "nodes": ["op:7"], "location": "/tmp/x.py:20", "edges": [], "data": {"nan_origin": ["op:7"]}},
    {"code": "frozen", "severity": "info", "message": "frozen.", "params": ["f.w"], "modules": ["f"],
     "nodes": ["param:f.w"], "location": None, "edges": [], "data": {}},
]}


@pytest.fixture
def win(qtbot, window):
    """The conftest window with the diagnosis panels installed."""
    from gradviz.app.diagnosis import install

    window.parts = install(window)
    yield window


def open_and_wait(qtbot, win, path):
    with qtbot.waitSignal(win.graphShown, timeout=WAIT_MS):
        win.open_script(path)


def click_title(qtbot, panel, i):
    """Click finding ``i``'s title link where it is drawn in the report."""
    from PySide6.QtCore import Qt

    browser = panel.browser
    doc = browser.document()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == f"show:{i}":
                cursor = browser.textCursor()
                cursor.setPosition(frag.position() + 1)
                rect = browser.cursorRect(cursor)
                qtbot.mouseClick(browser.viewport(), Qt.LeftButton, pos=rect.center())
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no title link for finding {i}")


def test_a_report_selects_and_marks_in_its_own_document(qtbot, win):
    open_and_wait(qtbot, win, BUGS / "detach.py")
    panel = win.parts["diagnosis"]
    doc = win.document
    selected = []
    win.nodeSelected.connect(selected.append)
    import copy
    report = copy.deepcopy(REPORT)
    real = next(n for n in doc.graph if n.startswith("op:"))
    report["findings"][1]["nodes"] = [real]               # a node this document has
    panel._done(doc, report)
    assert doc.findings is report
    assert "3 errors" not in panel.status.text() and "2 errors, 1 info" in panel.status.text()
    text = panel.browser.toPlainText()
    # every finding's whole why-and-fix text and its location are in the report
    assert "Remove the detach." in text and "The loss is nan." in text and "x.py:12" in text
    assert doc.marked_edges["broken"] == [("param:enc.weight", "op:3")]
    assert doc.marked_nodes["nan-origin"] == ["op:7"]
    with qtbot.waitSignal(panel.findingActivated, timeout=2000) as got:
        panel.activate(1)
    assert got.args[0]["code"] == "nan"
    assert win.selected == doc.visible_id(real) and win.selected      # selected in this document's view


def test_health_check_runs_in_the_background_and_frames_the_finding(qtbot, win):
    open_and_wait(qtbot, win, BUGS / "detach.py")
    panel = win.parts["diagnosis"]
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        job = win.parts["health_action"].trigger() or panel.job
        assert job is not None and not panel.run_button.isEnabled()
    assert [f["code"] for f in blocker.args[0]["findings"]] == ["unreachable"]
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=WAIT_MS)
    assert win.document.findings["findings"][0]["code"] == "unreachable"
    assert win.document.marked_edges.get("broken")             # the cut drawn red dashed
    assert win.scene.marks().edges.get("broken")
    f = panel.findings()[0]
    with qtbot.waitSignal(win.nodeSelected, timeout=5000) as sel:
        click_title(qtbot, panel, 0)
    assert sel.args[0] in f["nodes"] or sel.args[0].startswith("group:")
    rect = win.scene.node_item(win.selected).sceneBoundingRect()
    assert win.view.visible_scene_rect().contains(rect)          # framed: in view


def test_health_check_reports_a_script_error(qtbot, win):
    win.open_script(BUGS / "syntax_error.py")
    qtbot.waitUntil(lambda: win.document.status == "failed", timeout=WAIT_MS)
    panel = win.parts["diagnosis"]
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
        panel.run_check()
    assert panel.findings()[0]["code"] == "script-error"
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=WAIT_MS)


def test_gradcheck_table_in_model_order_and_double_click(qtbot, win):
    open_and_wait(qtbot, win, BUGS / "bad_backward.py")
    panel = win.parts["gradcheck"]
    names = [panel.params.item(i).text() for i in range(panel.params.count())]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]   # the model's order
    from PySide6.QtCore import Qt
    panel.params.item(2).setCheckState(Qt.Unchecked)
    assert panel.chosen_params() == ["fc1.weight", "fc1.bias", "fc2.bias"]
    panel.samples.setValue(3)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        panel.run_check()
    report = blocker.args[0]
    assert [p["name"] for p in report["params"]] == ["fc1.weight", "fc1.bias", "fc2.bias"]
    assert "step 0, the script's freshly built model" in panel.status.text()     # its numbers name their step
    assert panel.table.rowCount() == 3 + len(report["functions"])
    assert panel.table.item(0, 4).text().startswith("FAIL")
    assert panel.table.item(2, 4).text() == "pass"
    assert win.document.gradcheck is report
    qtbot.waitUntil(lambda: panel.run_button.isEnabled(), timeout=WAIT_MS)
    panel._double_clicked(1, 0)
    assert win.selected == "param:fc1.bias"


def test_cancel_stops_the_gradcheck_with_partial_rows(qtbot, win):
    open_and_wait(qtbot, win, SAMPLES / "mlp_digits.py")
    panel = win.parts["gradcheck"]
    panel.samples.setValue(0)        # every element: far too many to finish
    seen = []
    job = panel.run_check()
    original = job.on_progress
    job.on_progress = lambda p: (seen.append(p), original(p))
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        panel.cancel_button.click()
    qtbot.waitUntil(lambda: not job.active and panel.run_button.isEnabled(), timeout=10_000)
    report = blocker.args[0]
    total = seen[0][1]
    checked = sum(p["checked"] + p["skipped"] for p in report["params"])
    assert report["cancelled"] and 0 < checked < total
    assert panel.table.rowCount() >= 1 and "Cancelled" in panel.status.text()
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_installs_into_the_real_window(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from gradviz.app.main_window import MainWindow
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), extensions=True)
    qtbot.addWidget(w)
    try:
        assert "diagnosis" in w.extensions and not w.extension_errors
        parts = w.diagnosis_panels
        menus = [a.text().replace("&", "") for a in w.menuBar().actions()]
        assert "Diagnose" in menus
        assert parts["health_action"] in w.toolbar.actions()
        titles = [d.windowTitle() for d in w.docks.docks]
        assert "Diagnosis" in titles and "Gradcheck" in titles
    finally:
        w.shutdown()


def test_a_late_result_never_lands_in_another_document(qtbot, win):
    """A check started on one script, then another script opened: the old report is dropped."""
    open_and_wait(qtbot, win, BUGS / "detach.py")
    panel = win.parts["diagnosis"]
    first = win.document
    job = panel.run_check()
    open_and_wait(qtbot, win, SAMPLES / "mlp_digits.py")
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    qtbot.wait(100)
    assert win.document is not first
    assert win.document.findings is None and panel.findings() == []
    assert not win.document.marked_edges and not win.scene.marks().edges.get("broken")
    # a stale panel reference writing into the old document changes nothing on screen
    first.select(["param:encoder.0.weight"])
    first.mark_edges([("param:fc1.weight", "op:1")])
    assert win.selected == "" and not win.scene.marks().edges.get("broken")
