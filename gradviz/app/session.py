"""Which document is open, and the background work that fills it: tracing, grouping, layout.

``Session`` owns the current ``Document``. Opening or reloading a script makes a new
document at once (``documentChanged``): every panel drops what it showed, and the trace
job that fills the new document is bound to it, so its result is dropped if another
document was opened meanwhile. The session relays the current document's changes as
``documentEdited(doc, what, info)``; documents that are no longer current are muted.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Signal

from gradviz.app.document import Document, TraceResult, ViewResult
from gradviz.app.explain import DiagnosedError, explain_nonfinite_trace, explain_open_error
from gradviz.app.first_view import choose_grouping
from gradviz.app.jobs import JobContext, Jobs
from gradviz.core.layout.auto_view import AUTO_BOXES   # "about 40" items in the first view

log = logging.getLogger(__name__)


class Session(QObject):
    documentChanged = Signal(object)          # the new current Document
    documentEdited = Signal(object, str, dict)  # current document, what changed, details
    busyChanged = Signal(bool)
    phaseChanged = Signal(str)                # what the trace/layout lanes do now ('' = idle)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = Document()
        self.document.listen(self._edited)
        self.jobs = Jobs(self, is_current=lambda doc: doc is self.document)
        self.jobs.phaseChanged.connect(self._lane_phase)
        self._phases: dict[str, str] = {}
        self._after_view: list[Callable[[], None]] = []
        # True: structure only (meta device); False: always with values; None: structure only
        # when the model would not fit in memory (core/script/meta.py)
        self.meta: bool | None = None

    # -- the current document ------------------------------------------------------
    def replace(self, doc: Document) -> Document:
        """Make ``doc`` the current document; the old one is muted and its work cancelled."""
        old = self.document
        old.listen(None)
        for lane in ("trace", "layout"):
            self.jobs.cancel(lane)
        self._after_view.clear()
        self.document = doc
        doc.listen(self._edited)
        log.debug("document %r replaces %r", doc, old)
        self.documentChanged.emit(doc)
        return doc

    def _edited(self, doc: Document, what: str, info: dict) -> None:
        if doc is self.document:
            self.documentEdited.emit(doc, what, info)

    # -- busy ---------------------------------------------------------------------
    def _lane_phase(self, lane: str, phase: str) -> None:
        if lane not in ("trace", "layout"):
            return
        was = self.is_busy()
        if phase:
            self._phases[lane] = phase
        else:
            self._phases.pop(lane, None)
        self.phaseChanged.emit(self.phase())
        if was != self.is_busy():
            self.busyChanged.emit(self.is_busy())

    def phase(self) -> str:
        return self._phases.get("trace") or self._phases.get("layout") or ""

    def is_busy(self) -> bool:
        return bool(self._phases)

    # -- opening ----------------------------------------------------------------------
    def open_script(self, path: str | Path, fit: tuple[float, float] | None = None) -> Document:
        """Open (or reload) a script in a new document; ``fit`` is the viewport (w, h) its first
        view will be fitted to (see ``first_view``)."""
        path = Path(path).expanduser().resolve()
        old = self.document
        doc = self.replace(Document(path, "script"))
        # a reload keeps the user's grouping where the modules are still there
        hint = set(old.expanded) if old.path == path and old.graph is not None else None
        self.jobs.submit("trace", trace_job(path, fit, hint, self.meta), document=doc,
                         on_done=doc.set_trace, on_failed=lambda exc, tb: _failed(doc, exc, tb))
        self._lane_phase("trace", "loading script")
        return doc

    def show_graph(self, graph, doc: Document, fit: tuple[float, float] | None = None) -> None:
        """Show a graph that was not traced here (e.g. from a run file) in ``doc``: the graph
        is known at once (norms may be set on it), grouping and layout follow off the UI thread."""
        hint = set(doc.expanded) if doc.view is not None else None    # another step of the same run
        doc.set_graph(graph)
        self.jobs.submit("trace", graph_job(doc.path, graph, fit, hint), document=doc,
                         on_done=lambda r: doc.set_view(ViewResult(r.expanded, r.view, r.layout), fit=True),
                         on_failed=doc.fail)
        self._lane_phase("trace", "laying out the graph")

    # -- grouping -----------------------------------------------------------------------
    def default_grouping(self, fit: tuple[float, float] | None, then: Callable[[], None] | None = None) -> None:
        """The grouping a graph opens with (``first_view.choose_grouping``), laid out again."""
        doc = self.document
        if doc.graph is None:
            return
        self._after_view = [then] if then else []
        graph = doc.graph
        self.jobs.submit("layout", lambda ctx: _first_view(ctx, graph, fit, None)[1], document=doc,
                         on_done=lambda r: self._view_done(doc, r))
        self._lane_phase("layout", "layout")

    def set_expanded(self, expanded: set[str], then: Callable[[], None] | None = None) -> None:
        """Re-collapse and re-lay out (off the UI thread); ``then`` runs once it is shown."""
        doc = self.document
        if doc.graph is None:
            return
        self._after_view = [then] if then else []
        self.jobs.submit("layout", view_job(doc.graph, expanded), document=doc,
                         on_done=lambda r: self._view_done(doc, r))
        self._lane_phase("layout", "layout")

    def _view_done(self, doc: Document, result: ViewResult) -> None:
        callbacks, self._after_view = self._after_view, []
        doc.set_view(result, fit=False)
        for cb in callbacks:
            cb()

    def stop(self, wait_ms: int = 30000) -> bool:
        return self.jobs.stop(wait_ms)


def _failed(doc: Document, exc: BaseException, details: str) -> None:
    """A failed open: the check report that explained it (if any) goes with the failure."""
    if isinstance(exc, DiagnosedError):
        doc.set_findings(exc.report)
    doc.fail(exc, details)


# -- the jobs (run on the trace / layout lanes) ---------------------------------------

def trace_job(path: Path, fit: tuple[float, float] | None = None, expanded: set[str] | None = None,
              meta: bool | None = None):
    """Load the script, forward + backward, group (``expanded``, or the first view that fits
    ``fit``), lay out.

    Gradient norms only (``details="norms"``): the rest is fetched for the selected node
    (``app/details_fetcher.py``). ``meta``: see ``Session.meta``.
    """
    def job(ctx: JobContext) -> TraceResult:
        from gradviz.core.script.load import ScriptError, load_script
        from gradviz.core.trace.tracer import trace

        timings: dict[str, float] = {}
        ctx.phase("loading script")
        t0 = time.perf_counter()
        script = load_script(path)
        t1 = time.perf_counter()
        timings["load"] = t1 - t0
        script, model, use_meta, reason = choose_meta(ctx, script, meta)
        ctx.phase("forward + backward" if not use_meta else "forward + backward on the meta device")
        try:
            graph = trace(script, model, meta=use_meta, details="norms")
        except ScriptError as exc:
            # explained as `gradviz check` explains it (the in-place call, not torch's loss_fn line)
            ctx.phase("diagnosing the error")
            raise explain_open_error(str(path), exc, ctx.token) from exc
        if reason:
            graph.graph["meta_reason"] = reason
        del script, model
        timings["trace"] = time.perf_counter() - t1
        ctx.phase("checking the gradients")
        findings = explain_nonfinite_trace(str(path), graph, ctx.token)
        result = group_and_layout(ctx, path, graph, fit, timings, expanded)
        result.findings = findings
        return result

    return job


def choose_meta(ctx: JobContext, script, meta: bool | None):
    """(script, model built or None, structure only?, why) for ``Session.meta``: with None the
    model is built under a memory guard and, if it would not fit, traced structure-only."""
    if meta is not None:
        return script, None, meta, ""
    from gradviz.core.script.fit_guard import TooBig, build_within_memory
    from gradviz.core.script.meta import estimate

    try:
        return script, build_within_memory(script), False, ""
    except TooBig:
        ctx.phase("measuring the model on the meta device")
        est = estimate(script)
    if est is None:
        return script, None, False, ""
    return script, est.model, True, est.message(script.path.name)


def graph_job(path: Path | None, graph, fit: tuple[float, float] | None = None, expanded: set[str] | None = None):
    """Group and lay out a graph that was not traced here (e.g. read from a run file)."""
    def job(ctx: JobContext) -> TraceResult:
        return group_and_layout(ctx, path, graph, fit, {}, expanded)

    return job


def _first_view(ctx: JobContext, graph, fit, expanded) -> tuple[float, ViewResult]:
    """(seconds, the view): ``expanded`` if given, else the first view that fits ``fit``."""
    from gradviz.core.layout.folding import UNFOLD
    from gradviz.core.layout.grouping import collapse

    t0 = time.perf_counter()
    ctx.phase("grouping")
    if expanded is not None:
        modules = graph.graph.get("modules", {})
        expanded = {m for m in expanded if m.removeprefix(UNFOLD) in modules}
        view = collapse(graph, expanded=expanded)
        ctx.phase("layout")
        lay = layout_view(view)
    else:
        expanded, view, lay = choose_grouping(graph, fit, AUTO_BOXES, layout_view, ctx.check)
    return time.perf_counter() - t0, ViewResult(expanded, view, lay)


def group_and_layout(ctx: JobContext, path, graph, fit, timings: dict,
                     expanded: set[str] | None = None) -> TraceResult:
    seconds, v = _first_view(ctx, graph, fit, expanded)
    timings["layout"] = seconds
    return TraceResult(path, graph, v.expanded, v.view, v.layout, timings)


def view_job(graph, expanded: set[str]):
    """Re-collapse the full graph with a new set of expanded modules and lay it out."""
    expanded = set(expanded)

    def job(ctx: JobContext) -> ViewResult:
        from gradviz.core.layout.grouping import collapse

        t0 = time.perf_counter()
        ctx.phase("grouping")
        view = collapse(graph, expanded=expanded)
        ctx.phase("layout")
        lay = layout_view(view)
        return ViewResult(expanded, view, lay, time.perf_counter() - t0)

    return job


def layout_view(view):
    """Lay out with the box sizes the scene draws (``render.primitives.style.layout_graph``)."""
    from gradviz.render.primitives.style import layout_graph

    return layout_graph(view)
