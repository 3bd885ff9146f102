"""The status bar: script, device, nodes/edges, trace time, and a busy bar with the phase."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from gradviz.app.formatting import count, seconds


class StatusBar(QStatusBar):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.script = QLabel("no script")
        self.device = QLabel("")
        self.size_label = QLabel("")
        self.timing = QLabel("")
        self.step = QLabel("")          # the step of the numbers on screen
        self.phase = QLabel("")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(140)
        self.busy.setMaximumHeight(14)
        self.busy.setTextVisible(False)
        self.addWidget(self.script)
        self.addWidget(self.phase)
        self.addWidget(self.busy)
        for w in (self.step, self.device, self.size_label, self.timing):
            self.addPermanentWidget(w)
        self.set_busy(None)

    def set_busy(self, phase: str | None) -> None:
        self.busy.setVisible(phase is not None)
        self.phase.setVisible(phase is not None)
        self.phase.setText(f"{phase}…" if phase else "")

    def set_busy_phase(self, phase: str) -> None:
        """The session's phase ('' when idle)."""
        self.set_busy(phase or None)

    def is_busy(self) -> bool:
        return not self.busy.isHidden()

    def set_run(self, run: dict, view_nodes: int | None = None) -> None:
        script = run.get("script")
        self.script.setText(Path(script).name if script else "no script")
        self.script.setToolTip(script or "")
        self.device.setText(f"device: {run['device']}" if run.get("device") else "")
        nodes = f"{count(run.get('nodes'))} nodes · {count(run.get('edges'))} edges" if run.get("nodes") else ""
        if nodes and view_nodes is not None and view_nodes != run.get("nodes"):
            nodes += f" · {count(view_nodes)} shown"
        self.size_label.setText(nodes)
        traced = run.get("trace_seconds")
        self.timing.setText(f"traced in {seconds(traced)}" if traced is not None else "")

    def set_step(self, step: int | None, source: str, model_step: int | None = None) -> None:
        """Which step the numbers on screen are of, and where the live model is when elsewhere."""
        from gradviz.app.step_values import step_text

        if step is None and model_step is None:
            self.step.setText("")
            return
        text = f"numbers: {step_text(step, source)}" if step is not None else ""
        if model_step is not None and model_step != step:
            text += f" · model at step {model_step:,}"
        self.step.setText(text)
