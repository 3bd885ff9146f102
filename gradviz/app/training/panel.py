"""The Training dock: run controls, settings, live labels; wires worker -> history -> plots -> window."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDoubleSpinBox, QFileDialog, QFormLayout, QGridLayout,
                               QHBoxLayout, QLabel, QLineEdit, QPushButton, QSizePolicy, QSpinBox, QToolButton,
                               QVBoxLayout, QWidget)

from gradviz.app.contract import TrainingHost
from gradviz.app.explain import explain_nonfinite
from gradviz.app.document import Document
from gradviz.app.training.history import History
from gradviz.app.training.plots_slot import PlotsSlot
from gradviz.app.training.worker import TrainingWorker
from gradviz.app.training.worker_signals import WorkerSignals
from gradviz.core.train.trainer import SCHEDULES, TrainConfig, available_devices

if TYPE_CHECKING:
    from gradviz.app.training.plots import TrainingPlots

OPTIMIZER_CHOICES = [("script's", None), ("SGD", "sgd"), ("SGD + momentum", "sgd-momentum"), ("Adam", "adam"),
                     ("AdamW", "adamw")]


class TrainingPanel(WorkerSignals, QWidget):
    """Trains the current document's script; a new document stops it and clears the panel."""

    stateChanged = Signal(str)

    def __init__(self, host: TrainingHost, history: History | None = None, plots: TrainingPlots | None = None,
                 parent=None, plots_body: QWidget | None = None) -> None:
        # long: the controls and settings form, built in reading order
        super().__init__(parent)
        self.host = host
        self.doc: Document = host.document       # the document trained (what the worker's results go to)
        self.actions: dict[str, QAction] = {}
        self.history = history if history is not None else History()
        self.plots_slot = PlotsSlot(self.history, plots_body, plots)     # the plots, made on first use
        self.worker: TrainingWorker | None = None
        self._selected: str | None = None     # the graph's selected node: its stats follow training
        self._probed_for: tuple | None = None  # (step, detail node) of the last probe
        self._stopped_probe: tuple | None = None  # (step, detail node) being measured after Stop
        self._old_workers: list[TrainingWorker] = []
        self.state = "stopped"
        self.last_metrics: dict = {}
        # TrainConfig.diagnose_nonfinite: a non-finite loss is explained by the diagnosis engine
        self.diagnose_nonfinite = explain_nonfinite

        self.btn_start = QPushButton("Start")
        self.btn_pause = QPushButton("Pause")
        self.btn_resume = QPushButton("Resume")
        self.btn_step = QPushButton("Step")
        self.btn_stop = QPushButton("Stop")
        self.btn_reset = QPushButton("Reset")
        self.btn_start.clicked.connect(self.start)
        self.btn_pause.clicked.connect(self.pause)
        self.btn_resume.clicked.connect(self.resume)
        self.btn_step.clicked.connect(self.step)
        self.btn_stop.clicked.connect(self.stop)
        self.btn_reset.clicked.connect(self.reset)
        buttons = QGridLayout()
        for i, b in enumerate((self.btn_start, self.btn_pause, self.btn_resume, self.btn_step, self.btn_stop,
                               self.btn_reset)):
            buttons.addWidget(b, i // 3, i % 3)

        self.device = QComboBox()
        for d in available_devices():
            self.device.addItem(d.upper() if d != "mps" else "MPS", d)
        self.optimizer = QComboBox()
        for label, value in OPTIMIZER_CHOICES:
            self.optimizer.addItem(label, value)
        self.lr = QLineEdit()
        self.lr.setPlaceholderText("optimizer's")
        self.schedule = QComboBox()
        self.schedule.addItems(list(SCHEDULES))
        self.clip = QDoubleSpinBox()
        self.clip.setRange(0.0, 1e6)
        self.clip.setDecimals(3)
        self.clip.setSpecialValueText("off")
        self.clip.setValue(0.0)
        # seed 002's toggles (gradviz.core.stats.adaptive_clip / label_smoothing): 0 = off
        self.agc = QDoubleSpinBox()
        self.agc.setRange(0.0, 100.0)
        self.agc.setDecimals(3)
        self.agc.setSingleStep(0.01)
        self.agc.setSpecialValueText("off")
        self.agc.setToolTip("Per-layer adaptive gradient clipping: each gradient clipped to "
                            "λ · max(‖W‖, 1e-3) before the max-norm clip (0.01–0.1 is usual)")
        self.label_smoothing = QDoubleSpinBox()
        self.label_smoothing.setRange(0.0, 1.0)
        self.label_smoothing.setDecimals(2)
        self.label_smoothing.setSingleStep(0.05)
        self.label_smoothing.setSpecialValueText("off")
        self.label_smoothing.setToolTip("Label smoothing ε of the script's cross-entropy loss")
        self.accum = QSpinBox()
        self.accum.setRange(1, 1024)
        self.zero_grad = QCheckBox("zero grads every step")
        self.zero_grad.setChecked(True)
        self.amp = QCheckBox("AMP (CUDA)")
        self.fixed_range = QCheckBox("fixed colour range")
        self.fixed_range.toggled.connect(self._fixed_range_toggled)
        self.device.currentIndexChanged.connect(self._device_changed)
        self._device_changed()
        for w in (self.optimizer, self.schedule, self.clip, self.agc, self.label_smoothing, self.accum,
                  self.zero_grad, self.amp):
            sig = getattr(w, "currentIndexChanged", None) or getattr(w, "valueChanged", None) or w.toggled
            sig.connect(self._settings_changed)
        self.lr.editingFinished.connect(self._settings_changed)

        # the settings fold under one line that sums them up: open, the Training dock would take the
        # Modules tree's column (seen: 5 rows of tree left in a 940 px window)
        self.settings = QWidget()
        form = QFormLayout(self.settings)
        form.setContentsMargins(0, 0, 0, 0)
        form.addRow("Device", self.device)
        form.addRow("Optimizer", self.optimizer)
        form.addRow("Learning rate", self.lr)
        form.addRow("Schedule", self.schedule)
        form.addRow("Clip max-norm", self.clip)
        form.addRow("Adaptive clip λ", self.agc)
        form.addRow("Label smoothing ε", self.label_smoothing)
        form.addRow("Accumulate k", self.accum)
        checks = QHBoxLayout()
        checks.addWidget(self.zero_grad)
        checks.addWidget(self.amp)
        form.addRow(checks)
        form.addRow(self.fixed_range)

        self.step_label = QLabel("step —")
        self.loss_label = QLabel("loss —")
        self.acc_label = QLabel("")
        self.rate_label = QLabel("")
        live = QGridLayout()
        for lab in (self.step_label, self.loss_label, self.acc_label, self.rate_label):
            # the texts change every step: of Ignored width they never widen the dock (and move the graph);
            # one line each, never wrapped (a wrapped label's height is not the dock's: it was cut off)
            lab.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Minimum)
        live.addWidget(self.step_label, 0, 0)
        live.addWidget(self.acc_label, 0, 1)
        live.addWidget(self.rate_label, 0, 2)
        live.addWidget(self.loss_label, 1, 0, 1, 3)      # "loss 5.917e-05 (step 7,096)": the long one

        self.settings_toggle = QToolButton()
        self.settings_toggle.setCheckable(True)
        self.settings_toggle.setAutoRaise(True)
        self.settings_toggle.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.settings_toggle.toggled.connect(self.show_settings)
        self.settings_toggle.setToolTip("Show or hide the training settings")
        self.settings_toggle.setText("Settings")
        self.settings_line = QLabel()          # folded: what the settings are, in one (wrapped) line
        self.settings_line.setWordWrap(True)
        self.settings_line.setStyleSheet("color: palette(placeholder-text);")
        self.device.currentIndexChanged.connect(self._summarize)

        lay = QVBoxLayout(self)
        lay.addLayout(buttons)
        lay.addLayout(live)
        fold = QHBoxLayout()
        fold.addWidget(self.settings_toggle)
        fold.addWidget(self.settings_line, 1)
        lay.addLayout(fold)
        lay.addWidget(self.settings)
        lay.addStretch(1)
        self.show_settings(False)
        self._set_state("stopped")

    def show_settings(self, on: bool) -> None:
        """Open or fold the settings form (folded: one line says what they are)."""
        self.settings.setVisible(on)
        # folded, the panel is no taller than its content: the Modules tree above it gets the rest
        self.setMaximumHeight(16777215 if on else self.sizeHint().height())
        self.settings_toggle.setArrowType(Qt.DownArrow if on else Qt.RightArrow)
        if self.settings_toggle.isChecked() != on:
            self.settings_toggle.setChecked(on)
        self._summarize()

    def settings_summary(self) -> str:
        """The settings in one line: "script's optimizer · lr default · constant · clip 1"."""
        opt = self.optimizer.currentText()
        parts = [f"{opt} optimizer" if self.optimizer.currentData() is None else opt,
                 f"lr {self.lr.text().strip() or 'default'}", self.schedule.currentText()]
        for label, box in (("clip", self.clip), ("adaptive clip", self.agc), ("label smoothing", self.label_smoothing)):
            if box.value():
                parts.append(f"{label} {box.value():g}")
        if self.accum.value() > 1:
            parts.append(f"accumulate {self.accum.value()}")
        if self.device.currentData() != "cpu":
            parts.insert(0, self.device.currentText())
        return " · ".join(parts)

    def _summarize(self) -> None:
        folded = not self.settings_toggle.isChecked()
        self.settings_line.setText(self.settings_summary() if folded else "")
        self.settings_line.setVisible(folded)

    # -- settings ---------------------------------------------------------
    def config(self) -> TrainConfig:
        try:
            lr = float(self.lr.text()) if self.lr.text().strip() else None
        except ValueError:
            lr = None
        clip = self.clip.value() or None
        return TrainConfig(device=self.device.currentData(), optimizer=self.optimizer.currentData(), lr=lr,
                           schedule=self.schedule.currentText(), max_grad_norm=clip,
                           adaptive_clip=self.agc.value() or None, label_smoothing=self.label_smoothing.value(),
                           accumulation=self.accum.value(), zero_grad_every_step=self.zero_grad.isChecked(),
                           amp=self.amp.isChecked() and self.device.currentData() == "cuda",
                           diagnose_nonfinite=self.diagnose_nonfinite)

    def _device_changed(self) -> None:
        cuda = self.device.currentData() == "cuda"
        self.amp.setEnabled(cuda)
        if not cuda:
            self.amp.setChecked(False)

    def _settings_changed(self, *_) -> None:
        self._summarize()
        if self.worker is not None and self.worker.isRunning():
            self.worker.apply_config(self.config())

    def _fixed_range_toggled(self, on: bool) -> None:
        self.doc.set_fixed_range(self.host.color_range() if on else None)

    # -- controls ---------------------------------------------------------
    def is_running(self) -> bool:
        return self.worker is not None and self.worker.isRunning()

    def start(self, pause_at: int | None = None) -> None:
        if self.is_running():
            self.worker.resume()
            return
        doc = self.host.document
        if doc.kind != "script" or doc.path is None:
            self.host.show_error("Open a model script before training.")
            return
        if doc.status == "failed":      # its error is on screen: training it would only say it again
            self.host.show_message(f"{doc.name} could not be opened: fix it and reload (Ctrl+R) to train it", 8000)
            return
        script = str(doc.path)
        self.doc = doc
        self._retire_worker()
        self.history.set_names([])
        w = TrainingWorker(script, self.config(), self)
        w.ready.connect(self._on_ready)
        w.rowsReady.connect(self._on_rows)
        w.nodeNorms.connect(self._on_norms)
        w.nodeDetail.connect(self._on_detail)
        w.set_detail_node(self._selected)
        w.metricsReady.connect(self._on_metrics)
        w.stateChanged.connect(self._set_state)
        w.failed.connect(self._on_failed)
        w.wasReset.connect(self._on_reset)
        w.probed.connect(lambda values, w=w: self._on_probed(w, values))
        self.worker = w
        w.pause_at = pause_at
        w.start_training()
        self._set_state("running")

    def pause(self) -> None:
        if self.is_running():
            self.worker.pause()

    def train_steps(self, n: int) -> None:
        """Train ``n`` more steps, then pause (``--train-steps``, tests)."""
        if self.is_running():
            self.worker.train_steps(n)
        else:
            self.start(pause_at=n)

    def resume(self) -> None:
        if self.is_running():
            self.worker.resume()
        else:
            self.start()

    def step(self) -> None:
        if self.is_running():
            self.worker.step_once()
            return
        self.start()
        if self.worker is None:
            return          # nothing to train (a run file, a failed script): start said why
        self.worker.pause()
        self.worker.step_once()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def reset(self) -> None:
        if self.is_running():
            self.worker.reset()
        else:
            self.history.clear()
            self.plots_slot.refresh()
            self.step_label.setText("step —")
            self.loss_label.setText("loss —")
            self.acc_label.setText("")

    def shutdown(self, wait_ms: int = 30000) -> bool:
        """Stop the training thread and wait for it (the window is closing)."""
        ok = True
        for w in [self.worker, *self._old_workers]:
            if w is not None and w.isRunning():
                w.stop()
                ok = w.wait(wait_ms) and ok
        self.plots_slot.stop()
        return ok

    def _retire_worker(self) -> None:
        if self.worker is not None:
            self.worker.stopped_trainer = None      # its model is no longer the document's
            self.doc.recompute = None
            self.worker.stop()
            if not self.worker.wait(10000):
                self._old_workers.append(self.worker)
                return
            self.worker.deleteLater()
        self.worker = None

    def _set_state(self, state: str) -> None:
        if self._from_retired_worker():
            return
        self.state = state
        worker = self.worker
        if state == "paused" and worker is not None:
            self.doc.recompute = lambda nid, w=worker: self._recompute(w, nid)
        elif state == "stopped" and worker is not None and worker.stopped_trainer is not None:
            self.doc.recompute = lambda nid, w=worker: self._recompute_stopped(w, nid)
        else:
            self.doc.recompute = None
        running, paused = state == "running", state == "paused"
        self.btn_start.setEnabled(not running and not paused)
        self.btn_pause.setEnabled(running)
        self.btn_resume.setEnabled(paused)
        self.btn_step.setEnabled(not running)
        self.btn_stop.setEnabled(running or paused)
        self.device.setEnabled(not (running or paused))
        for name, button in (("start", self.btn_start), ("pause", self.btn_pause), ("resume", self.btn_resume),
                             ("step", self.btn_step), ("stop", self.btn_stop)):
            if name in self.actions:
                self.actions[name].setEnabled(button.isEnabled())
        self.stateChanged.emit(state)

    @property
    def plots(self) -> TrainingPlots:
        """The Training plots widget (made, and put in its dock, the first time it is asked for)."""
        return self.plots_slot.widget

    def set_actions(self, actions: dict[str, QAction]) -> None:
        """The Run menu's actions: enabled exactly when their buttons are."""
        self.actions = actions
        self._set_state(self.state)

    # -- documents ----------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        """Another document: training of the old one stops, its history and labels go."""
        self._retire_worker()
        self.doc = doc
        self.history.set_names([])
        self.plots_slot.clear()
        self.last_metrics = {}
        self.step_label.setText("step —")
        self.loss_label.setText("loss —")
        self.acc_label.setText("")
        self.rate_label.setText("")
        self._set_state("stopped")

    # -- graph selection --------------------------------------------------
    def node_selected(self, nid: str) -> None:
        self._selected = nid or None
        if self.worker is not None:
            self.worker.set_detail_node(self._selected)
        self.plots_slot.follow_selection(nid, self.host.node_color)

    def export_csv(self, path: str | None = None) -> Path | None:
        if path is None:
            path, _ = QFileDialog.getSaveFileName(self, "Export training history", "training.csv",
                                                  "CSV files (*.csv)")
            if not path:
                return None
        return self.history.to_csv(path)
