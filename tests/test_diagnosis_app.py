"""The diagnosis panels (pytest-qt, offscreen): findings drive the graph selection and
marks; the gradient check runs in the background and cancels; the real window gets
the Diagnose menu, toolbar action and docks."""
from __future__ import annotations

from pathlib import Path

import pytest


import gradviz.app  # noqa: E402,F401  (PySide6 workaround first)
from PySide6.QtCore import QObject, QSettings, Qt, Signal  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
BUGS = SAMPLES / "bugs"
WAIT_MS = 120_000


class StandIn(QObject):
    """The part of the window contract the panels use, recording the calls."""

    graphChanged = Signal(object)

    def __init__(self, script=None):
        super().__init__()
        self.script = script
        self.selected, self.edges, self.nodes, self.errors = [], [], [], []

    def current_script(self):
        return self.script

    def select_nodes(self, ids, center=True):
        self.selected.append(list(ids))

    def mark_edges(self, edges, style="broken"):
        self.edges.append((list(edges), style))

    def mark_nodes(self, ids, style="nan-origin"):
        self.nodes.append((list(ids), style))

    def show_error(self, error, details="", title=None):
        self.errors.append(str(error))


REPORT = {"script": "x.py", "ok": False, "seconds": 0.5, "findings": [
    {"code": "unreachable", "severity": "error", "message": "`enc.weight` gets no gradient. Remove the detach.",
     "params": ["enc.weight"], "modules": ["enc"], "nodes": ["param:enc.weight", "op:3"],
     "location": "/tmp/x.py:12", "edges": [["param:enc.weight", "op:3"]], "data": {}},
    {"code": "nan", "severity": "error", "message": "The loss is nan.", "params": [], "modules": [],
     "nodes": ["op:7"], "location": "/tmp/x.py:20", "edges": [], "data": {"nan_origin": ["op:7"]}},
    {"code": "frozen", "severity": "info", "message": "frozen.", "params": ["f.w"], "modules": ["f"],
     "nodes": ["param:f.w"], "location": None, "edges": [], "data": {}},
]}


def _click(qtbot, panel, row):
    lw = panel.list
    item = lw.item(row)
    rect = lw.visualItemRect(item)
    qtbot.mouseClick(lw.viewport(), Qt.LeftButton, pos=rect.center())


def test_clicking_a_finding_selects_its_nodes(qtbot):
    from gradviz.app.diagnosis import DiagnosisPanel
    win = StandIn()
    panel = DiagnosisPanel(win)
    qtbot.addWidget(panel)
    panel.resize(500, 600)
    panel.show()
    panel.set_report(REPORT)
    assert panel.list.count() == 3
    # results drawn at once: broken edges and the NaN origin
    assert win.edges == [([("param:enc.weight", "op:3")], "broken")]
    assert win.nodes == [(["op:7"], "nan-origin")]
    _click(qtbot, panel, 0)
    assert win.selected[-1] == ["param:enc.weight", "op:3"]
    assert panel.location.location() == "/tmp/x.py:12"
    assert "no gradient" in panel.detail.toPlainText()
    _click(qtbot, panel, 1)
    assert win.selected[-1] == ["op:7"] and win.nodes[-1] == (["op:7"], "nan-origin")
    _click(qtbot, panel, 2)
    assert win.selected[-1] == ["param:f.w"] and panel.location.location() == ""


def test_health_check_runs_in_the_background(qtbot):
    from gradviz.app.diagnosis import DiagnosisPanel
    win = StandIn(str(BUGS / "detach.py"))
    panel = DiagnosisPanel(win)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        job = panel.run_check()
        assert job is not None and not panel.run_button.isEnabled()
    assert [f["code"] for f in blocker.args[0]["findings"]] == ["unreachable"]
    qtbot.waitUntil(lambda: not job.isRunning() and panel.run_button.isEnabled(), timeout=WAIT_MS)
    assert panel.list.count() == 1
    assert win.edges and win.edges[0][1] == "broken"
    _click(qtbot, panel, 0)
    assert "param:encoder.0.weight" in win.selected[-1]


def test_health_check_reports_a_script_error(qtbot):
    from gradviz.app.diagnosis import DiagnosisPanel
    panel = DiagnosisPanel(StandIn(str(BUGS / "syntax_error.py")))
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
        panel.run_check()
    assert panel.findings()[0]["code"] == "script-error"
    qtbot.waitUntil(lambda: not panel.job.isRunning(), timeout=WAIT_MS)


def test_gradcheck_panel_table_and_double_click(qtbot):
    from gradviz.app.diagnosis import GradcheckPanel
    win = StandIn(str(BUGS / "bad_backward.py"))
    panel = GradcheckPanel(win)
    qtbot.addWidget(panel)
    panel.set_params(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
    panel.params.item(2).setCheckState(Qt.Unchecked)
    assert panel.chosen_params() == ["fc1.weight", "fc1.bias", "fc2.bias"]
    panel.samples.setValue(3)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        panel.run_check()
    report = blocker.args[0]
    assert [p["name"] for p in report["params"]] == ["fc1.weight", "fc1.bias", "fc2.bias"]
    assert panel.table.rowCount() == 3 + len(report["functions"])
    assert panel.table.item(0, 4).text().startswith("FAIL")
    assert panel.table.item(2, 4).text() == "pass"
    qtbot.waitUntil(lambda: not panel.job.isRunning(), timeout=WAIT_MS)
    panel._double_clicked(1, 0)
    assert win.selected[-1] == ["param:fc1.bias"]


def test_cancel_stops_the_gradcheck(qtbot):
    from gradviz.app.diagnosis import GradcheckPanel
    win = StandIn(str(SAMPLES / "mlp_digits.py"))
    panel = GradcheckPanel(win)
    qtbot.addWidget(panel)
    panel.samples.setValue(0)        # every element: far too many to finish
    seen = []
    job = panel.run_check()
    job.progress.connect(lambda d, t, n: seen.append((d, t)))
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS) as blocker:
        panel.cancel_button.click()
    qtbot.waitUntil(lambda: not job.isRunning() and panel.run_button.isEnabled(), timeout=10_000)
    assert job.isFinished()
    report = blocker.args[0]
    total = seen[0][1]
    checked = sum(p["checked"] + p["skipped"] for p in report["params"])
    assert report["cancelled"] and 0 < checked < total
    assert panel.table.rowCount() >= 1 and "Cancelled" in panel.status.text()
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()


@pytest.fixture
def real_window(qtbot, tmp_path):
    from gradviz.app.main_window import MainWindow
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    win = MainWindow(settings=settings, extensions=False)
    from gradviz.app.diagnosis import install
    parts = install(win)
    qtbot.addWidget(win)
    win.resize(1300, 850)
    win.show()
    qtbot.waitExposed(win)
    yield win, parts
    for key in ("diagnosis", "gradcheck"):
        job = parts[key].job
        if job is not None:
            job.shutdown()
    win.shutdown()


def test_installs_into_the_real_window(qtbot, real_window):
    win, parts = real_window
    menus = [a.text().replace("&", "") for a in win.menuBar().actions()]
    assert "Diagnose" in menus
    assert parts["health_action"] in win.toolbar.actions()
    titles = [d.windowTitle() for d in win.findChildren(type(win.inspector_dock))]
    assert "Diagnosis" in titles and "Gradcheck" in titles
    with qtbot.waitSignal(win.graphShown, timeout=WAIT_MS):
        win.open_script(BUGS / "detach.py")
    assert parts["gradcheck"].params.count() == 6
    panel = parts["diagnosis"]
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
        parts["health_action"].trigger()
    qtbot.waitUntil(lambda: not panel.job.isRunning(), timeout=WAIT_MS)
    f = panel.findings()[0]
    _click(qtbot, panel, 0)
    assert win.selected in f["nodes"] or win.selected.startswith("group:")
    assert f["edges"] == [list(e) for e in f["edges"]]


def test_loaded_as_an_extension(qtbot, tmp_path):
    from gradviz.app.main_window import MainWindow
    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), extensions=True)
    qtbot.addWidget(win)
    try:
        assert "gradviz.app.diagnosis" in win.extensions
        assert not [n for n, _ in win.extension_errors if n == "gradviz.app.diagnosis"]
        assert hasattr(win, "diagnosis_panel") and hasattr(win, "gradcheck_panel")
    finally:
        win.shutdown()
