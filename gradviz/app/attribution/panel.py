"""The Attribution panel: which inputs the loss (or an output) depends on, for the open
script's batch — saliency, gradient × input or integrated gradients with its completeness
check. It runs ``gradviz.core.attribution.attribute.attribute`` as a job on the "attribution" lane,
bound to the document; the result (numpy arrays) is the document's ``attribution`` part,
so another script never shows it.

The model is the one the script builds (``model()`` with trace's seed), not weights a
training run in this window produced: the status line says so.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFormLayout, QHBoxLayout, QLabel, QScrollArea, QSpinBox,
                               QVBoxLayout, QWidget)

from gradviz.app.attribution.figure import FigureWidget
from gradviz.app.contract import PanelHost
from gradviz.app.dock_action import grow_dock
from gradviz.app.document import Document
from gradviz.app.job_controls import JobControls
from gradviz.app.jobs import Job, JobContext
from gradviz.core.attribution.figure import n_examples

PART = "attribution"
METHODS = (("Integrated gradients", "ig"), ("Saliency |∂f/∂x|", "saliency"), ("Gradient × input", "grad-x-input"))
TARGETS = ("loss", "label", "pred")
IDLE_TEXT = ("Which inputs the loss (or one output) depends on, for the script's batch. "
             "Integer inputs (token ids) are attributed through their embedding.")
WEIGHTS_NOTE = "step 0's weights, the script's freshly built model (seed 0)"


def attribution_job(path: str, method: str, target: str, steps: int, baseline, step: int):
    """The job: attribute the script's batch ``batch(step)``; progress is (passes done, total)."""
    def job(ctx: JobContext):
        from gradviz.core.attribution.attribute import attribute
        from gradviz.core.attribution.paths import read_baseline

        ctx.phase("loading script")
        start = read_baseline(baseline) if isinstance(baseline, str) else baseline   # a file: read here, off the UI

        def progress(done: int, total: int) -> None:
            ctx.check()                 # a newer run or Cancel stops it between passes
            ctx.emit((done, total))

        return attribute(path, method=method, target=target, steps=steps, baseline=start, step=step,
                         progress=progress)

    return job


class AttributionPanel(QWidget):
    finished = Signal(object)   # the AttributionResult shown

    def __init__(self, host: PanelHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.doc: Document = host.document
        self.job: Job | None = None
        self.method = QComboBox()
        for text, key in METHODS:
            self.method.addItem(text, key)
        self.target = QComboBox()
        self.target.setEditable(True)
        self.target.addItems(TARGETS)
        self.target.setToolTip("loss; an output index K (its logit, summed over the batch); label (each "
                               "example's own label); pred (each example's predicted class)")
        self.steps = QSpinBox()
        self.steps.setRange(1, 10000)
        self.steps.setValue(50)
        self.steps.setToolTip("Integration points (Gauss–Legendre) for integrated gradients")
        self.baseline = QComboBox()
        self.baseline.setEditable(True)
        self.baseline.addItems(["zeros"])
        self.baseline.setToolTip("'zeros' (zero embedding vectors for token ids), a number (inputs filled "
                                 "with it, token ids set to it), or a .npy / .pt file of tensors shaped like "
                                 "the inputs (one per input)")
        self.example = QSpinBox()
        self.example.setRange(0, 0)
        self.whole_batch = QCheckBox("whole batch (mean |attribution|)")
        self.controls = JobControls("Attribute")
        self.run_button, self.cancel_button = self.controls.run_button, self.controls.cancel_button
        self.progress = self.controls.progress
        self.status = QLabel(IDLE_TEXT)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.figure = FigureWidget()
        self.scroll = scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.figure)
        self._layout(scroll)
        self.run_button.clicked.connect(lambda: self.run())
        self.cancel_button.clicked.connect(self.cancel)
        self.method.currentIndexChanged.connect(self._method_changed)
        self.example.valueChanged.connect(lambda _v: self._redraw())
        self.whole_batch.toggled.connect(lambda _on: self._redraw())
        host.documentChanged.connect(self.show_document)
        self.show_document(host.document)

    def _layout(self, scroll: QScrollArea) -> None:
        form = QFormLayout()
        form.addRow("Method", self.method)
        form.addRow("Target", self.target)
        form.addRow("Steps", self.steps)
        form.addRow("Baseline", self.baseline)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        shown = QHBoxLayout()
        shown.addWidget(QLabel("Example"))
        shown.addWidget(self.example)
        shown.addWidget(self.whole_batch, 1)
        left = QVBoxLayout()
        left.addLayout(form)
        left.addLayout(buttons)
        left.addWidget(self.progress)
        left.addStretch(1)
        right = QVBoxLayout()
        right.addWidget(self.status)
        right.addLayout(shown)
        right.addWidget(scroll, 1)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addLayout(left, 1)
        lay.addLayout(right, 4)

    def _method_changed(self, _index: int) -> None:
        ig = self.method.currentData() == "ig"    # steps and baseline belong to integrated gradients
        self.steps.setEnabled(ig)
        self.baseline.setEnabled(ig)

    # -- documents --------------------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        if self.job is not None and self.job.active:
            self.job.cancel()           # its result would be dropped anyway: stop spending the CPU on it
        self.doc = doc
        self.job = None
        self.controls.reset()
        self.show_result(doc.parts.get(PART))

    # -- running ------------------------------------------------------------------------
    def run(self) -> Job | None:
        doc = self.host.document
        if doc.kind != "script" or doc.path is None:
            self.status.setText("Open a model script first: attribution runs its model on its batch.")
            return None
        baseline = self.baseline.currentText().strip() or "zeros"
        if baseline != "zeros":
            try:
                baseline = float(baseline)
            except ValueError:
                if not Path(baseline).expanduser().is_file():
                    self.status.setText(f"The baseline must be 'zeros', a number or a .npy / .pt file, "
                                        f"not {baseline!r}.")
                    return None
        step = int(doc.graph.graph.get("step") or 0) if doc.graph is not None else 0
        self.doc = doc
        self.show_result(None)
        self.status.setText("Attributing…")
        self.controls.started()
        fn = attribution_job(str(doc.path), self.method.currentData(), self.target.currentText().strip(),
                             self.steps.value(), baseline, step)
        self.job = self.host.jobs.submit(PART, fn, document=doc, on_done=lambda r: self._done(doc, r),
                                         on_failed=self._failed,
                                         on_progress=lambda p: self.controls.advanced(*p),
                                         on_ended=self.controls.ended)
        return self.job

    def cancel(self) -> None:
        if self.job is not None and self.job.active:
            self.job.cancel()
            self.status.setText("Cancelled.")

    def _failed(self, exc: BaseException, details: str) -> None:
        self.status.setText(f"Attribution could not run: {exc}")

    def _done(self, doc: Document, result) -> None:
        doc.set_part(PART, result)
        self.show_result(result)
        self.controls.finished()
        self._grow_dock()
        self.finished.emit(result)

    def _grow_dock(self) -> None:
        """Room for the figure: it, plus what the panel shows besides its scroll area."""
        grow_dock(self, self.figure.height() + (self.height() - self.scroll.viewport().height()) + 30)

    # -- showing --------------------------------------------------------------------------
    def show_result(self, result) -> None:
        self.result = result
        if result is None:
            self.example.setRange(0, 0)
            self.figure.show_result(None, 0)
            self.status.setText(IDLE_TEXT)
            return
        self.example.setRange(0, max(n_examples(result) - 1, 0))
        self.status.setText(summary(result, self.doc.model_step if self.doc is not None else 0))
        self._redraw()

    def _redraw(self) -> None:
        if self.result is not None:
            self.figure.show_result(self.result, None if self.whole_batch.isChecked() else self.example.value())


def summary(result, trained: int | None = 0) -> str:
    """What the figure shows and from which weights: the script's model as built (step 0's), with the
    step training is at when that is later (the gradcheck panel says it the same way)."""
    weights = WEIGHTS_NOTE + (f" (training is at step {trained:,}: not its weights)" if trained else "")
    parts = [f"batch({result.step}), {result.passes} pass{'es' if result.passes != 1 else ''} in "
             f"{result.seconds:.2f} s, model in eval mode, {weights}."]
    c = result.completeness
    if c is not None:
        verdict = "holds" if c.ok else "FAILS — raise Steps"
        parts.append(f"Completeness {verdict}: Σ attributions {c.attribution_sum:.5g} vs f(x) − f(baseline) "
                     f"{c.output_delta:.5g} ({100 * c.rel_error:.2f} % off).")
    return " ".join(parts)
