"""Run / Cancel buttons and a status line driving one background check at a time (what the
Diagnosis and Gradcheck panels share): start it on the current script's document, cancel it,
put the buttons back when it ended, and say so when it failed. (``app/job_controls.JobControls`` is
the Attribution and Compare panels' progress-bar variant; this one reports in words.)"""
from __future__ import annotations

from typing import Any, Callable

from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy

from gradviz.app.contract import PanelHost
from gradviz.app.document import Document
from gradviz.app.jobs import Job


class CheckControls:
    def __init__(self, host: PanelHost, run_text: str, idle_text: str, what: str) -> None:
        self.host = host
        self.what = what                    # "The health check", "The gradient check"
        self.job: Job | None = None
        self.run_button = QPushButton(run_text)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel(idle_text)
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)

    def script_document(self) -> Document | None:
        """The current document when it is a script (else says so and gives None)."""
        doc = self.host.document
        if doc.kind != "script" or doc.path is None:
            self.status.setText("Open a model script first.")
            return None
        return doc

    def start(self, lane: str, fn: Callable, doc: Document, on_done: Callable[[Any], None],
              on_ended: Callable[[str], None] | None = None, **callbacks) -> Job:
        self.status.setText("Checking…")
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)

        def ended(outcome: str) -> None:
            self.idle()
            if outcome == "cancelled":
                self.status.setText("Cancelled.")
            if on_ended is not None:
                on_ended(outcome)

        self.job = self.host.jobs.submit(lane, fn, document=doc, on_done=on_done, on_failed=self._failed,
                                         on_ended=ended, **callbacks)
        return self.job

    def cancel(self) -> None:
        if self.job is not None and self.job.active:
            self.job.cancel()
            self.status.setText("Cancelling…")

    def idle(self) -> None:
        """Ready to run (a job ended, or another document came)."""
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _failed(self, exc: BaseException, details: str) -> None:
        self.status.setText(f"{self.what} failed to run: {type(exc).__name__}: {exc}")
        self.host.show_error(exc, details=details, title=f"{self.what} failed")
