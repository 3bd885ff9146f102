"""The graph of a failing forward, in the window: ``install(host)`` (see ``app/extensions.py``).

When opening a script fails because its forward (or ``loss_fn``) raised, the document is
"failed" and the Errors panel says why. This part then draws what ran before the failing
call (``core/partial_trace.trace_failure``, on the "partial" lane, bound to that document):
the failing call in red with its input shapes and the error under it. The document stays
"failed" (title "x.py (could not open)"); opening or reloading replaces it as usual.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from PySide6.QtCore import QObject, Signal, SignalInstance

from gradviz.app.contract import PanelHost
from gradviz.app.document import Document
from gradviz.app.jobs import Job, JobContext
from gradviz.core.runtime.errors import ScriptError

log = logging.getLogger(__name__)

__all__ = ["install", "FailingForward", "FailureHost"]


@runtime_checkable
class FailureHost(PanelHost, Protocol):
    """A panel host that reports failed opens and can show a graph it did not trace."""

    traceFailed: SignalInstance       # (exception) opening the current document failed

    def show_graph(self, graph: Any, document: Document) -> None: ...


def forward_error(error: BaseException | None) -> ScriptError | None:
    """The forward's (or loss_fn's) own error in what the window reports: the error itself, or
    the one the opening diagnosis explained (``app/explain.DiagnosedError`` is raised from it)."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, ScriptError) and error.code == "forward-error":
            return error
        error, seen = error.__cause__, seen + 1
    return None


def partial_job(path: Path, step: int = 0):
    def job(ctx: JobContext):
        from gradviz.core.trace.partial_trace import trace_failure

        ctx.phase("tracing up to the failing call")
        return trace_failure(path, step=step)

    return job


class FailingForward(QObject):
    shown = Signal(object)     # the partial graph, once it is on its way to the screen

    def __init__(self, host: FailureHost) -> None:
        super().__init__()
        self.host = host
        self.job: Job | None = None
        host.traceFailed.connect(self.trace_failed)

    def trace_failed(self, error: BaseException) -> Job | None:
        doc = self.host.document
        if forward_error(error) is None or doc.kind != "script" or doc.path is None:
            return None       # the script did not load, or the batch could not be made: nothing ran to draw
        self.job = self.host.jobs.submit("partial", partial_job(doc.path), document=doc,
                                         on_done=lambda graph: self._done(doc, graph),
                                         on_failed=lambda exc, _details: log.info("no partial graph: %s", exc))
        return self.job

    def _done(self, doc: Document, graph) -> None:
        if graph is None:     # the rerun did not fail (a flaky script): leave the error as it is
            return
        self.host.show_graph(graph, doc)
        self.shown.emit(graph)


def install(host: FailureHost) -> FailingForward:
    return FailingForward(host)
