"""Background jobs of the diagnosis panels: ``check`` and the gradient check.

Each job runs on its own QThread; signals carry small dicts (findings, per-parameter
results), never tensors or models. ``cancel()`` sets an event the engine polls between
two element evaluations (gradcheck) or two checklist stages (check).
"""
from __future__ import annotations

import atexit
import threading
import traceback
import weakref

import shiboken6
from PySide6.QtCore import QThread, Signal


class _Job(QThread):
    failed = Signal(str, str)          # message, details

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.stop_event = threading.Event()
        _LIVE.add(self)

    def cancel(self) -> None:
        self.stop_event.set()

    def shutdown(self, wait_ms: int = 30000) -> bool:
        self.cancel()
        return self.wait(wait_ms)


class CheckJob(_Job):
    """``check_report(script, steps)``; emits ``done({script, ok, seconds, findings: [dict]})``."""

    stage = Signal(str)
    done = Signal(object)

    def __init__(self, script: str, steps: int = 0, parent=None) -> None:
        super().__init__(parent)
        self.script = script
        self.steps = steps

    def run(self) -> None:
        try:
            from gradviz.core.diagnosis.checklist import check_report

            report = check_report(self.script, steps=self.steps, progress=self.stage.emit,
                                  cancel=self.stop_event.is_set)
            self.done.emit(report.to_dict())
        except BaseException as exc:  # noqa: BLE001 - reported to the UI
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())


class GradcheckJob(_Job):
    """``gradcheck_script``; emits ``progress(done, total, name)`` and ``done(report dict)``."""

    progress = Signal(int, int, str)
    done = Signal(object)

    def __init__(self, script: str, params: list[str] | None = None, samples: int | None = 16,
                 eps: float = 1e-6, parent=None) -> None:
        super().__init__(parent)
        self.script, self.params, self.samples, self.eps = script, params, samples, eps

    def run(self) -> None:
        try:
            from gradviz.core.diagnosis.gradcheck import gradcheck_script

            report = gradcheck_script(self.script, params=self.params, samples=self.samples, eps=self.eps,
                                      progress=self.progress.emit, cancel=self.stop_event)
            self.done.emit(report.to_dict())
        except BaseException as exc:  # noqa: BLE001
            self.failed.emit(f"{type(exc).__name__}: {exc}", traceback.format_exc())


_LIVE: "weakref.WeakSet[_Job]" = weakref.WeakSet()


def stop_all(wait_ms: int = 30000) -> None:
    for job in list(_LIVE):
        if not shiboken6.isValid(job):
            continue  # its C++ side is gone already (deleted with its parent): nothing runs
        if job.isRunning():
            job.shutdown(wait_ms)


@atexit.register
def _stop_at_exit() -> None:
    """Threads must end before Qt destroys them at exit."""
    stop_all(10000)
