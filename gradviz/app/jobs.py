"""The window's one helper for background work: trace, layout, check, gradcheck, run following.

A job is a plain function ``fn(ctx) -> result`` run on a *lane*: one ``QThread`` per lane
name ("trace", "layout", "check", ...), started on first use. A lane runs its jobs one at a
time; submitting a job supersedes the lane's earlier ones (their results will be dropped).

Cancellation is one type everywhere, ``CancelToken``: a ``threading.Event`` that is also
callable, so it can be handed to the engine as ``cancel=`` whether the engine polls
``cancel()`` (``check_report``) or ``cancel.is_set()`` (``gradcheck_script``). A job
either returns early with what it has (a partial gradient check: delivered) or raises
``Cancelled`` (delivered as "cancelled").

Results, progress and failures travel back to the GUI thread by a queued signal and are
handed to the callbacks there, never in the worker. A job bound to a document
(``document=``) is dropped on arrival when that document is no longer the window's
current one: a result can never land in another document. Payloads are plain Python
objects (dicts, numpy arrays, networkx graphs): the model and its tensors die in the job.
"""
from __future__ import annotations

import atexit
import itertools
import logging
import threading
import traceback
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from gradviz.core.runtime.errors import GradvizError

log = logging.getLogger(__name__)

__all__ = ["Cancelled", "CancelToken", "JobContext", "Job", "Jobs"]


class Cancelled(GradvizError):
    """Raised inside a job (by ``JobContext.check``) once its token is set."""


class CancelToken(threading.Event):
    """Set to ask a job to stop. ``token()`` and ``token.is_set()`` both say whether it is."""

    def __call__(self) -> bool:
        return self.is_set()


class JobContext:
    """What a running job may do: look at its token, report a phase or a payload, sleep."""

    def __init__(self, job: "Job", send: Callable[[int, str, Any], None]) -> None:
        self.token = job.token
        self._job = job
        self._send = send

    def check(self) -> None:
        """Raise ``Cancelled`` when the job was cancelled or superseded."""
        if self.token.is_set():
            raise Cancelled(f"{self._job.lane} job cancelled")

    def phase(self, text: str) -> None:
        """A new phase ("layout", "forward + backward"): checks the token, then tells the GUI."""
        self.check()
        self._send(self._job.id, "phase", text)

    def emit(self, payload: Any) -> None:
        """Hand a payload (progress, a batch of new rows) to ``on_progress`` in the GUI thread."""
        self._send(self._job.id, "progress", payload)

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when the job was cancelled meanwhile (it should return)."""
        return self.token.wait(seconds)


@dataclass(eq=False)
class Job:
    """A submitted job (its handle): ``cancel()`` it, ask whether it is ``active``."""

    id: int
    lane: str
    fn: Callable[[JobContext], Any]
    document: Any = None
    on_done: Callable[[Any], None] | None = None
    on_failed: Callable[[BaseException, str], None] | None = None
    on_progress: Callable[[Any], None] | None = None
    on_phase: Callable[[str], None] | None = None
    on_ended: Callable[[str], None] | None = None        # "done" | "failed" | "cancelled"
    token: CancelToken = field(default_factory=CancelToken)
    superseded: bool = False        # a newer job of the lane replaced it: nothing of it is delivered
    outcome: str = ""               # set when it ended

    def cancel(self) -> None:
        self.token.set()

    @property
    def active(self) -> bool:
        return not self.outcome


class _LaneWorker(QObject):
    """Lives on a lane's thread; runs the jobs it is sent, one at a time."""

    def __init__(self, send: Callable[[int, str, Any], None]) -> None:
        super().__init__()
        self._deliver_to = send

    def _send(self, job_id: int, kind: str, payload: Any) -> None:
        try:
            self._deliver_to(job_id, kind, payload)
        except RuntimeError:
            # the window's Jobs object was deleted while this job ran (a stop() that timed out, a
            # window collected without shutdown): nobody is left to tell (seen under torch 2.15 as
            # "Signal source has been deleted" raised in a lane thread during the next test)
            log.debug("job %d ended after its window was deleted", job_id, exc_info=True)

    @Slot(object)
    def run(self, job: Job) -> None:
        send = self._send
        if job.token.is_set():
            send(job.id, "ended", "cancelled")
            return
        try:
            result = job.fn(JobContext(job, send))
        except Cancelled:
            send(job.id, "ended", "cancelled")
        except BaseException as exc:  # noqa: BLE001 - a user script may raise anything (SystemExit too)
            if isinstance(exc, KeyboardInterrupt):
                raise
            send(job.id, "failed", (exc, traceback.format_exc()))
            send(job.id, "ended", "failed")
        else:
            send(job.id, "done", result)
            send(job.id, "ended", "done")
        # the model, its tensors and autograd graph are unreferenced now; their cycles are
        # collected by the GUI thread (app/gc_guard.py), never here


class Jobs(QObject):
    """The lanes of one window. ``is_current(document)`` says whether a document still counts."""

    _delivered = Signal(int, str, object)    # job id, kind, payload: queued to the GUI thread
    phaseChanged = Signal(str, str)          # lane, phase text ('' when the lane went idle)

    def __init__(self, parent: QObject | None = None,
                 is_current: Callable[[Any], bool] | None = None) -> None:
        super().__init__(parent)
        self._is_current = is_current or (lambda _doc: True)
        self._ids = itertools.count(1)
        self._jobs: dict[int, Job] = {}
        self._lanes: dict[str, tuple[QThread, _LaneWorker, Signal]] = {}
        self._submitters: dict[str, _Submitter] = {}
        self._latest: dict[str, Job] = {}
        self._delivered.connect(self._deliver)
        self._stopped = False            # after stop(): a submitted job is not run (no new lane thread)
        _LIVE.add(self)

    # -- submitting ----------------------------------------------------------
    def submit(self, lane: str, fn: Callable[[JobContext], Any], *, document: Any = None,
               on_done=None, on_failed=None, on_progress=None, on_phase=None, on_ended=None) -> Job:
        """Run ``fn(ctx)`` on ``lane``; earlier jobs of the lane are cancelled and superseded. After
        ``stop()`` (the window is closing) the job is cancelled at once and never runs."""
        self.cancel(lane)
        job = Job(next(self._ids), lane, fn, document, on_done, on_failed, on_progress, on_phase, on_ended)
        if self._stopped:
            job.token.set()
            job.outcome = "cancelled"
            return job
        self._jobs[job.id] = job
        self._latest[lane] = job
        self._submitter(lane).send.emit(job)
        return job

    def cancel(self, lane: str | None = None) -> None:
        """Cancel and supersede the jobs of ``lane`` (of every lane when None)."""
        for job in list(self._jobs.values()):
            if lane is None or job.lane == lane:
                job.superseded = True
                job.cancel()
        for name in ([lane] if lane else list(self._latest)):
            if self._latest.pop(name, None) is not None:
                self.phaseChanged.emit(name, "")

    def current(self, lane: str) -> Job | None:
        """The lane's latest job while it has not ended."""
        job = self._latest.get(lane)
        return job if job is not None and job.active else None

    def busy(self, lane: str | None = None) -> bool:
        lanes = [lane] if lane else list(self._latest)
        return any(self.current(name) is not None for name in lanes)

    def _submitter(self, lane: str) -> "_Submitter":
        if lane not in self._lanes:
            thread = QThread()
            thread.setObjectName(f"gradviz-{lane}")
            worker = _LaneWorker(self._delivered.emit)
            # both held here until the thread's event loop ended: a QThread destroyed while it runs
            # aborts the process (as when a window is collected without having been shut down)
            _THREADS[thread] = worker
            thread.finished.connect(lambda t=thread: _THREADS.pop(t, None))
            worker.moveToThread(thread)
            submitter = _Submitter()
            submitter.send.connect(worker.run)          # queued: the worker lives on the thread
            thread.start()
            self._lanes[lane] = (thread, worker, submitter)
            self._submitters[lane] = submitter
        return self._submitters[lane]

    # -- delivering (GUI thread) ------------------------------------------------
    @Slot(int, str, object)
    def _deliver(self, job_id: int, kind: str, payload: Any) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            return
        if kind in ("done", "failed", "ended"):
            # the work is over once its result is here: the lane is idle before the result is shown
            job.outcome = job.outcome or (payload if kind == "ended" else kind)
            if self._latest.get(job.lane) is job:
                del self._latest[job.lane]
                self.phaseChanged.emit(job.lane, "")
        if kind == "ended":
            del self._jobs[job_id]
        if job.superseded or (job.document is not None and not self._is_current(job.document)):
            return      # replaced by a newer job, or its document is gone: nothing of it is shown
        callback = {"done": job.on_done, "failed": job.on_failed, "progress": job.on_progress,
                    "phase": job.on_phase, "ended": job.on_ended}[kind]
        if kind == "phase":
            self.phaseChanged.emit(job.lane, payload)
        if callback is None:
            if kind == "failed":
                log.warning("background %s job failed:\n%s", job.lane, payload[1])
            return
        if kind == "failed":
            callback(*payload)
        else:
            callback(payload)

    # -- ending ----------------------------------------------------------------
    def stop(self, wait_ms: int = 30000) -> bool:
        """Cancel everything and end the lanes' threads; False when a job still runs after ``wait_ms``."""
        self._stopped = True
        self.cancel()
        ok = True
        for thread, _worker, _sub in self._lanes.values():
            thread.quit()
            ok = thread.wait(wait_ms) and ok
        if ok:
            self._lanes.clear()
            self._submitters.clear()
            _LIVE.discard(self)
        return ok


class _Submitter(QObject):
    """Carries jobs to a lane's worker by a queued signal (it lives in the GUI thread)."""

    send = Signal(object)


_LIVE: "weakref.WeakSet[Jobs]" = weakref.WeakSet()
_THREADS: dict[QThread, QObject] = {}   # every lane thread whose event loop has not ended, with its worker


@atexit.register
def _stop_all() -> None:
    """Threads must end before Qt destroys them at exit (Qt aborts otherwise)."""
    for jobs in list(_LIVE):
        try:
            jobs.stop(5000)
        except RuntimeError:
            log.debug("job lanes already deleted at exit", exc_info=True)
    for thread in list(_THREADS):      # lanes of Jobs objects collected without stop()
        thread.quit()
        thread.wait(5000)
