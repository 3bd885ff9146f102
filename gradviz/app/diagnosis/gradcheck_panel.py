"""The Gradcheck panel: choose parameters, samples and epsilon; compare autograd with
central differences in float64 in the background; one table row per parameter (and per
custom ``autograd.Function``), in the model's order. The rows belong to the document
they were computed for (``doc.gradcheck``): opening another script clears them."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QAbstractItemView, QDoubleSpinBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel,
                               QListWidget, QListWidgetItem, QProgressBar, QSpinBox, QTableWidget,
                               QTableWidgetItem, QVBoxLayout, QWidget)

from gradviz.app.contract import PanelHost
from gradviz.app.diagnosis.check_controls import CheckControls
from gradviz.app.diagnosis.jobs import gradcheck_job
from gradviz.app.document import Document
from gradviz.app.jobs import Job

IDLE_TEXT = "Numerical gradients by central differences in float64, on a copy of the model."


def model_order_params(graph) -> list[str]:
    """The trainable parameters of a traced graph in the model's own order (``named_parameters``),
    not the order backward reached them."""
    if graph is None:
        return []
    trainable = {a.get("param") for _, a in graph.nodes(data=True)
                 if a.get("kind") == "param" and a.get("requires_grad", True) is not False}
    ordered = [p for info in graph.graph.get("modules", {}).values() for p in info.get("params", ())]
    return [p for p in ordered if p in trainable] + sorted(p for p in trainable - set(ordered) if p)


class GradcheckPanel(QWidget):
    COLUMNS = ("parameter", "elements", "max abs err", "max rel err", "pass")
    checkFinished = Signal(object)

    def __init__(self, host: PanelHost, parent=None) -> None:
        super().__init__(parent)
        self.host = host
        self.doc: Document = host.document
        self.report: dict | None = None
        self.controls = CheckControls(host, "Run gradient check", IDLE_TEXT, "The gradient check")
        self.run_button, self.cancel_button, self.status = (self.controls.run_button, self.controls.cancel_button,
                                                            self.controls.status)
        self.run_button.clicked.connect(lambda: self.run_check())
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
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels(list(self.COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.cellDoubleClicked.connect(self._double_clicked)
        # a wide, short dock: choices on the left, results on the right
        form = QFormLayout()
        form.addRow("Samples / parameter", self.samples)
        form.addRow("Epsilon", self.eps)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        left = QVBoxLayout()
        left.addWidget(QLabel("Parameters:"))
        left.addWidget(self.params, 1)
        left.addLayout(form)
        left.addLayout(buttons)
        right = QVBoxLayout()
        right.addWidget(self.progress)
        right.addWidget(self.status)
        right.addWidget(self.table, 1)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addLayout(left, 2)
        lay.addLayout(right, 3)
        host.documentChanged.connect(self.show_document)
        host.graphChanged.connect(lambda graph: self.set_params(model_order_params(graph)))

    # -- documents --------------------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        self.doc = doc
        self.controls.job = None
        self.controls.idle()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.set_params(model_order_params(doc.graph))
        self.show_report(doc.gradcheck)

    # -- parameters ---------------------------------------------------------------------
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

    # -- running ---------------------------------------------------------------------------
    @property
    def job(self) -> Job | None:
        return self.controls.job

    def run_check(self) -> Job | None:
        doc = self.controls.script_document()
        if doc is None:
            return None
        params = self.chosen_params()
        if params == []:
            self.status.setText("Choose at least one parameter.")
            return None
        self.doc = doc
        self.show_report(None)
        self.progress.setRange(0, 0)
        job = gradcheck_job(str(doc.path), params, self.samples.value() or None, float(self.eps.value()))
        return self.controls.start("gradcheck", job, doc, lambda r: self._done(doc, r), on_ended=self._ended,
                                   on_progress=self._progress)

    def cancel(self) -> None:
        self.controls.cancel()

    def _ended(self, _outcome: str) -> None:
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)

    def _progress(self, payload) -> None:
        done, total, name = payload
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.status.setText(f"Checking {name} ({done}/{total} elements)…")

    def _done(self, doc: Document, report: dict) -> None:
        doc.set_gradcheck(report)
        self.show_report(report)
        if not report.get("cancelled"):
            self.progress.setValue(self.progress.maximum())
        self.checkFinished.emit(report)

    # -- showing -------------------------------------------------------------------------
    def show_report(self, report: dict | None) -> None:
        self.report = report
        if report is None:
            self.table.setRowCount(0)
            self.status.setText(IDLE_TEXT)
            return
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
        # the check builds the script's model afresh: its numbers are step 0's, whatever training did since
        trained = self.doc.model_step
        step = "step 0, the script's freshly built model" + (
            f" (training is at step {trained:,})" if trained else "")
        self.status.setText(head + (f"{n_bad} failed" if n_bad else "all passed")
                            + f" ({report.get('seconds', 0):.1f} s, eps={report.get('eps'):g}, "
                              f"{report.get('dtype')}; {step}). " + " ".join(report.get("notes", [])))

    def _double_clicked(self, row: int, _col: int) -> None:
        item = self.table.item(row, 0)
        if item is None:
            return
        data = item.data(Qt.UserRole) or {}
        if data.get("kind") == "param":
            self.doc.select([f"param:{data['name']}"])
        elif data.get("function") and self.doc.graph is not None:
            ids = [n for n, a in self.doc.graph.nodes(data=True) if a.get("custom") == data["function"]]
            if ids:
                self.doc.select(ids)
