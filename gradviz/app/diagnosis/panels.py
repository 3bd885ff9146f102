"""The Diagnosis panel (findings of ``check``) and the Gradcheck panel (numerical check).

Both are plain QWidgets driven by a worker; they talk to the window only through the
extension contract (``select_nodes``, ``mark_edges``, ``mark_nodes``, ``current_script``,
``show_error``), so they work with any object offering those.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QApplication, QDoubleSpinBox, QFormLayout, QHBoxLayout,
                               QHeaderView, QLabel, QListWidget, QListWidgetItem, QProgressBar, QPushButton,
                               QSpinBox, QSplitter, QStyle, QTableWidget, QTableWidgetItem, QTextBrowser,
                               QVBoxLayout, QWidget)

from gradviz.app.diagnosis.workers import CheckJob, GradcheckJob
from gradviz.app.source_link import LocationLabel

ROLE_FINDING = Qt.UserRole + 1
ICON_FOR = {"error": QStyle.SP_MessageBoxCritical, "warning": QStyle.SP_MessageBoxWarning,
            "info": QStyle.SP_MessageBoxInformation}


def _icon(severity: str):
    return QApplication.style().standardIcon(ICON_FOR.get(severity, QStyle.SP_MessageBoxQuestion))


def _first_sentence(text: str, limit: int = 140) -> str:
    head = text.split(". ", 1)[0]
    return head if len(head) <= limit else head[: limit - 1] + "…"


class _JobPanel(QWidget):
    """What both panels share: find the script, run one background job at a time, cancel it.

    Subclasses have ``status``, ``run_button``, ``cancel_button`` and ``job``."""

    failure_text = "The check failed to run"

    def _script(self, script: str | None) -> str | None:
        if script is None and self.window is not None:
            script = self.window.current_script()
        if not script:
            self.status.setText("Open a model script first.")
        return script or None

    def _launch(self, job):
        """Start ``job`` (already built): buttons, signals, and the panel's reference to it."""
        self.status.setText("Checking…")
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        job.done.connect(self._done)
        job.failed.connect(self._failed)
        job.finished.connect(self._job_ended)
        self.job = job
        job.start()
        return job

    def cancel(self) -> None:
        if self.job is not None and self.job.isRunning():
            self.job.cancel()
            self.status.setText("Cancelling…")

    def _job_ended(self) -> None:
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _failed(self, message: str, details: str) -> None:
        self.status.setText(f"{self.failure_text}: {message}")
        if self.window is not None and hasattr(self.window, "show_error"):
            self.window.show_error(message, details=details)


class DiagnosisPanel(_JobPanel):
    """Findings list; clicking one selects its nodes and shows its message and location."""

    failure_text = "The check itself failed"

    findingActivated = Signal(dict)
    checkFinished = Signal(object)     # the report dict

    def __init__(self, window=None, parent=None) -> None:
        super().__init__(parent)
        self.window = window
        self.report: dict | None = None
        self.job: CheckJob | None = None
        self.run_button = QPushButton("Run health check")
        self.run_button.setToolTip("Run the gradient checklist on the current script (in the background)")
        self.run_button.clicked.connect(lambda: self.run_check())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel("Run a health check to see what is wrong with the gradients.")
        self.status.setWordWrap(True)
        self.list = QListWidget()
        self.list.setSelectionMode(QAbstractItemView.SingleSelection)
        self.list.setWordWrap(True)
        self.list.itemClicked.connect(self._clicked)
        self.list.currentItemChanged.connect(lambda cur, _prev: self._show(cur))
        self.detail = QTextBrowser()
        self.detail.setOpenLinks(False)
        self.location = LocationLabel()
        top = QHBoxLayout()
        top.addWidget(self.run_button)
        top.addWidget(self.cancel_button)
        top.addStretch(1)
        lower = QWidget()
        ll = QVBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        loc_row = QHBoxLayout()
        loc_row.addWidget(QLabel("Location:"))
        loc_row.addWidget(self.location, 1)
        ll.addLayout(loc_row)
        ll.addWidget(self.detail, 1)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.list)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)

    # -- running ---------------------------------------------------------------
    def run_check(self, script: str | None = None, steps: int = 0) -> CheckJob | None:
        script = self._script(script)
        if script is None:
            return None
        self.cancel()
        self.list.clear()
        self.detail.clear()
        self.location.set_location(None)
        job = CheckJob(script, steps, self)
        job.stage.connect(lambda s: self.status.setText(f"Checking: {s}…"))
        return self._launch(job)

    def _done(self, report: dict) -> None:
        self.set_report(report)
        self.checkFinished.emit(report)

    # -- showing -----------------------------------------------------------------
    def set_report(self, report: dict) -> None:
        self.report = report
        self.list.clear()
        findings = report.get("findings", [])
        counts = {s: sum(1 for f in findings if f["severity"] == s) for s in ("error", "warning", "info")}
        if not findings:
            self.status.setText(f"No problems found ({report.get('seconds', 0):.1f} s): every parameter gets a "
                                "finite gradient; norms, activations and the numerical check look healthy.")
        else:
            self.status.setText(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} "
                                f"info ({report.get('seconds', 0):.1f} s). Click one to see it in the graph.")
        for f in findings:
            item = QListWidgetItem(_icon(f["severity"]), f"{f['code']}: {_first_sentence(f['message'])}")
            item.setData(ROLE_FINDING, f)
            item.setToolTip(f["message"])
            self.list.addItem(item)
        self.mark_all()

    def mark_all(self) -> None:
        """Broken edges and NaN origins of every finding, drawn in the graph."""
        if self.window is None or self.report is None:
            return
        edges = [tuple(e) for f in self.report.get("findings", []) for e in f.get("edges", [])]
        origins = [n for f in self.report.get("findings", []) for n in (f.get("data") or {}).get("nan_origin", [])]
        if edges and hasattr(self.window, "mark_edges"):
            self.window.mark_edges(edges, "broken")
        if origins and hasattr(self.window, "mark_nodes"):
            self.window.mark_nodes(origins, "nan-origin")

    def findings(self) -> list[dict]:
        return [self.list.item(i).data(ROLE_FINDING) for i in range(self.list.count())]

    def _show(self, item) -> None:
        if item is None:
            return
        f = item.data(ROLE_FINDING)
        parts = [f"<b>{f['severity'].upper()} — {f['code']}</b>", f"<p>{_html(f['message'])}</p>"]
        if f.get("params"):
            parts.append("<p><b>Parameters:</b> " + ", ".join(_html(p) for p in f["params"][:20]) + "</p>")
        if f.get("modules"):
            parts.append("<p><b>Modules:</b> " + ", ".join(_html(m or "(model)") for m in f["modules"]) + "</p>")
        self.detail.setHtml("".join(parts))
        self.location.set_location(f.get("location"))

    def _clicked(self, item) -> None:
        f = item.data(ROLE_FINDING)
        self._show(item)
        if self.window is not None:
            if f.get("nodes"):
                self.window.select_nodes(list(f["nodes"]))
            if f.get("edges") and hasattr(self.window, "mark_edges"):
                self.window.mark_edges([tuple(e) for e in f["edges"]], "broken")
            origin = (f.get("data") or {}).get("nan_origin")
            if origin and hasattr(self.window, "mark_nodes"):
                self.window.mark_nodes(list(origin), "nan-origin")
        self.findingActivated.emit(f)


def _html(text: str) -> str:
    import html
    return html.escape(str(text))


class GradcheckPanel(_JobPanel):
    """Choose parameters, samples and epsilon; run in the background; a per-parameter table."""

    failure_text = "The gradient check failed to run"

    COLUMNS = ("parameter", "elements", "max abs err", "max rel err", "pass")
    checkFinished = Signal(object)

    def __init__(self, window=None, parent=None) -> None:
        super().__init__(parent)
        self.window = window
        self.job: GradcheckJob | None = None
        self.report: dict | None = None
        self.params = QListWidget()
        self.params.setToolTip("Parameters to check (all by default)")
        self.samples = QSpinBox()
        self.samples.setRange(0, 100000)
        self.samples.setValue(16)
        self.samples.setSpecialValueText("all")
        self.samples.setToolTip("Elements checked per parameter (0 = all of them)")
        self.eps = QDoubleSpinBox()
        self.eps.setDecimals(10)
        self.eps.setRange(1e-10, 1e-1)
        self.eps.setSingleStep(1e-6)
        self.eps.setValue(1e-6)
        self.eps.setToolTip("Central-difference step (float64: 1e-6 is a good default; 1e-4..1e-6 is usual)")
        self.run_button = QPushButton("Run gradient check")
        self.run_button.clicked.connect(lambda: self.run_check())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("Numerical gradients by central differences in float64, on a copy of the model.")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(list(self.COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.cellDoubleClicked.connect(self._double_clicked)
        form = QFormLayout()
        form.addRow("Samples / parameter", self.samples)
        form.addRow("Epsilon", self.eps)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Parameters:"))
        lay.addWidget(self.params, 1)
        lay.addLayout(form)
        lay.addLayout(buttons)
        lay.addWidget(self.progress)
        lay.addWidget(self.status)
        lay.addWidget(self.table, 2)

    # -- parameters ------------------------------------------------------------------
    def set_graph(self, graph) -> None:
        """Fill the checkable parameter list from a traced graph (all checked)."""
        names = []
        if graph is not None:
            names = [a.get("param") for _, a in graph.nodes(data=True)
                     if a.get("kind") == "param" and a.get("requires_grad", True) is not False]
        self.set_params([n for n in names if n])

    def set_params(self, names: list[str]) -> None:
        self.params.clear()
        for n in names:
            item = QListWidgetItem(n)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked)
            self.params.addItem(item)

    def chosen_params(self) -> list[str] | None:
        if self.params.count() == 0:
            return None
        chosen = [self.params.item(i).text() for i in range(self.params.count())
                  if self.params.item(i).checkState() == Qt.Checked]
        return None if len(chosen) == self.params.count() else chosen

    # -- running -------------------------------------------------------------------------
    def run_check(self, script: str | None = None) -> GradcheckJob | None:
        script = self._script(script)
        if script is None:
            return None
        params = self.chosen_params()
        if params == []:
            self.status.setText("Choose at least one parameter.")
            return None
        self.cancel()
        self.table.setRowCount(0)
        self.progress.setRange(0, 0)
        samples = self.samples.value() or None
        job = GradcheckJob(script, params, samples, float(self.eps.value()), self)
        job.progress.connect(self._progress)
        return self._launch(job)

    def _job_ended(self) -> None:
        super()._job_ended()
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)

    def _progress(self, done: int, total: int, name: str) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.status.setText(f"Checking {name} ({done}/{total} elements)…")

    def _done(self, report: dict) -> None:
        self.report = report
        rows = report.get("params", []) + report.get("functions", [])
        self.table.setRowCount(len(rows))
        bad = QColor(200, 40, 40)
        for r, row in enumerate(rows):
            values = [row["name"], f"{row['checked']}/{row['numel']}", f"{row['max_abs']:.2e}",
                      f"{row['max_rel']:.2e}", "pass" if row["passed"] else f"FAIL ({row['failed']})"]
            for c, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, row)
                if not row["passed"]:
                    item.setForeground(bad)
                self.table.setItem(r, c, item)
        n_bad = sum(1 for row in rows if not row["passed"])
        head = "Cancelled: partial results. " if report.get("cancelled") else ""
        self.status.setText(head + (f"{n_bad} failed" if n_bad else "all passed")
                            + f" ({report.get('seconds', 0):.1f} s, eps={report.get('eps'):g}, "
                              f"{report.get('dtype')}). " + " ".join(report.get("notes", [])))
        if not report.get("cancelled"):
            self.progress.setValue(self.progress.maximum())
        self.checkFinished.emit(report)

    def _double_clicked(self, row: int, _col: int) -> None:
        item = self.table.item(row, 0)
        if item is None or self.window is None:
            return
        data = item.data(Qt.UserRole) or {}
        if data.get("kind") == "param":
            self.window.select_nodes([f"param:{data['name']}"])
        elif data.get("function"):
            graph = getattr(getattr(self.window, "document", None), "graph", None)
            ids = [n for n, a in graph.nodes(data=True) if a.get("custom") == data["function"]] if graph else []
            if ids:
                self.window.select_nodes(ids)
