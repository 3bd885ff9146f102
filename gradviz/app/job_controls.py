"""Run / Cancel buttons and a progress bar that follow one background job of a panel."""
from __future__ import annotations

from PySide6.QtWidgets import QProgressBar, QPushButton


class JobControls:
    def __init__(self, run_text: str) -> None:
        self.run_button = QPushButton(run_text)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.idle()

    def idle(self) -> None:
        """Nothing running (a new document, or the job ended)."""
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        if self.progress.maximum() == 0:       # busy indicator: back to an empty bar
            self.progress.setRange(0, 1)
            self.progress.setValue(0)

    def reset(self) -> None:
        self.idle()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)

    def started(self) -> None:
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setRange(0, 0)           # busy until the first progress report

    def advanced(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)

    def finished(self) -> None:
        self.progress.setValue(self.progress.maximum())

    def ended(self, _outcome: str = "") -> None:
        self.idle()
