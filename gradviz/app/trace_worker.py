"""Tracing, collapsing and laying out off the UI thread.

A ``JobRunner`` owns one ``QThread`` with a worker ``QObject`` moved onto it. Each
``submit`` gets a new generation number; a job whose generation is no longer the
latest when it starts (or reaches its next phase) is dropped, so a newer request
supersedes an older one. Results travel back by queued signals as plain Python
objects (networkx graphs, ``Layout``): the model and its tensors die in the worker.
"""
from __future__ import annotations

import atexit
import time
import weakref
import traceback
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from gradviz.app.document import TraceResult, ViewResult

Report = Callable[[str], None]


class Superseded(Exception):
    """Raised inside a job when a newer request made it pointless."""


class _Worker(QObject):
    def __init__(self, runner: "JobRunner") -> None:
        super().__init__()
        self._runner = runner

    @Slot(int, object)
    def run(self, gen: int, job: Callable[[Report], Any]) -> None:
        runner = self._runner
        if gen != runner.latest:
            return

        def report(phase: str) -> None:
            if gen != runner.latest:
                raise Superseded()
            runner.progress.emit(gen, phase)

        runner._running = gen
        try:
            result = job(report)
        except Superseded:
            return
        except BaseException as exc:  # noqa: BLE001 - a user script may raise anything (SystemExit too)
            if isinstance(exc, KeyboardInterrupt):
                raise
            runner.failed.emit(gen, exc, traceback.format_exc())
        else:
            runner.finished.emit(gen, result)
        finally:
            # the model, its tensors and autograd graph are unreferenced now; their cycles are
            # collected by the GUI thread (app/gc_guard.py), never here
            runner._running = 0


class JobRunner(QObject):
    """Runs jobs one at a time on its own thread; only the latest request counts."""

    progress = Signal(int, str)       # generation, phase text
    finished = Signal(int, object)    # generation, result
    failed = Signal(int, object, str)  # generation, exception, formatted traceback
    _submit = Signal(int, object)

    def __init__(self, name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.latest = 0
        self._running = 0
        self._name = name
        self._thread: QThread | None = None   # started on the first job

    def _start(self) -> None:
        self._thread = QThread()
        self._thread.setObjectName(self._name)
        self._worker = _Worker(self)
        self._worker.moveToThread(self._thread)
        self._submit.connect(self._worker.run)
        self._thread.start()
        _LIVE.add(self)

    def submit(self, job: Callable[[Report], Any]) -> int:
        if self._thread is None:
            self._start()
        self.latest += 1
        self._submit.emit(self.latest, job)
        return self.latest

    def cancel(self) -> None:
        """Make every pending or running job stale."""
        self.latest += 1

    def is_current(self, gen: int) -> bool:
        return gen == self.latest

    @property
    def busy(self) -> bool:
        return self._running != 0

    def stop(self, wait_ms: int = 30000) -> bool:
        """Stop the thread; True when it ended (a job still running keeps it alive)."""
        self.cancel()
        if self._thread is None:
            return True
        self._thread.quit()
        done = self._thread.wait(wait_ms)
        if done:
            _LIVE.discard(self)
        return done


_LIVE: "weakref.WeakSet[JobRunner]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """Threads must end before Qt destroys them at exit (Qt aborts otherwise)."""
    for runner in list(_LIVE):
        try:
            runner.stop(5000)
        except RuntimeError:  # the C++ object is already gone
            pass


# -- the jobs ----------------------------------------------------------------

def trace_job(path: str | Path, max_boxes: int = 200) -> Callable[[Report], TraceResult]:
    """Load the script, forward + backward, collapse to ``auto_depth``, lay out."""
    path = Path(path)

    def job(report: Report) -> TraceResult:
        from gradviz.core.script import load_script
        from gradviz.core.trace import trace

        timings: dict[str, float] = {}
        report("loading script")
        t0 = time.perf_counter()
        script = load_script(path)
        t1 = time.perf_counter()
        timings["load"] = t1 - t0
        report("forward + backward")
        graph = trace(script)
        del script
        timings["trace"] = time.perf_counter() - t1
        return _group_and_layout(path, graph, max_boxes, report, timings)

    return job


def graph_job(path: Path, graph, max_boxes: int) -> Callable[[Report], TraceResult]:
    """Group and lay out a graph that was not traced here (e.g. read from a run file)."""
    def job(report: Report) -> TraceResult:
        return _group_and_layout(path, graph, max_boxes, report, {})

    return job


def _group_and_layout(path: Path, graph, max_boxes: int, report: Report, timings: dict) -> TraceResult:
    from gradviz.core.grouping import auto_depth, collapse, expanded_to_depth

    t0 = time.perf_counter()
    report("grouping")
    expanded = expanded_to_depth(graph, auto_depth(graph, max_boxes))
    view = collapse(graph, expanded=expanded)
    t1 = time.perf_counter()
    timings["collapse"] = t1 - t0
    report("layout")
    lay = _layout(view)
    timings["layout"] = time.perf_counter() - t1
    return TraceResult(path, graph, expanded, view, lay, timings)


def view_job(graph, expanded: set[str]) -> Callable[[Report], ViewResult]:
    """Re-collapse the full graph with a new set of expanded modules and lay it out."""
    expanded = set(expanded)

    def job(report: Report) -> ViewResult:
        from gradviz.core.grouping import collapse

        t0 = time.perf_counter()
        report("grouping")
        view = collapse(graph, expanded=expanded)
        report("layout")
        lay = _layout(view)
        return ViewResult(expanded, view, lay, time.perf_counter() - t0)

    return job


def _layout(view):
    """Lay out with the box sizes the scene draws (``render.style.layout_graph``)."""
    from gradviz.render.style import layout_graph

    return layout_graph(view)
