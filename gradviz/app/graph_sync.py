"""Document ↔ scene: opening and tracing scripts, re-grouping, and putting the result on
screen (scene, outline, inspector, status bar, search) with the live norms and marks
extensions set on the document.

Tracing and layout run on two ``JobRunner`` threads; a newer request supersedes an
older one. ``window.tracer`` / ``window.layouter`` are these runners.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QTimer

from gradviz.app.document import TraceResult, ViewResult
from gradviz.app.trace_worker import JobRunner, graph_job, trace_job, view_job
from gradviz.core.record.schema import EXTENSION as RUN_EXTENSION

AUTO_BOXES = 220  # "about 200" items in the first view (see grouping.auto_depth)
PANELS_REFRESH_MS = 200  # live norms repaint the module tree and the summary at most this often


class GraphSync:
    def __init__(self, window) -> None:
        self.window = window
        self.document = window.document
        self._after_view: list[Callable[[], None]] = []
        self.tracer = JobRunner("gradviz-trace", window)
        self.tracer.progress.connect(lambda gen, phase: self._on_progress(self.tracer, gen, phase))
        self.tracer.finished.connect(self._on_traced)
        self.tracer.failed.connect(self._on_trace_failed)
        self.layouter = JobRunner("gradviz-layout", window)
        self.layouter.progress.connect(lambda gen, phase: self._on_progress(self.layouter, gen, phase))
        self.layouter.finished.connect(self._on_view)
        self.layouter.failed.connect(self._on_layout_failed)
        self._panels_timer = QTimer(window)
        self._panels_timer.setSingleShot(True)
        self._panels_timer.setInterval(PANELS_REFRESH_MS)
        self._panels_timer.timeout.connect(self._refresh_panels)

    # -- busy state -----------------------------------------------------------
    def is_busy(self) -> bool:
        return self.window.status.busy.isVisible()

    def set_busy(self, phase: str | None) -> None:
        was = self.is_busy()
        self.window.status.set_busy(phase)
        if was != (phase is not None):
            self.window.busyChanged.emit(phase is not None)

    def _on_progress(self, runner: JobRunner, gen: int, phase: str) -> None:
        if runner.is_current(gen):
            self.set_busy(phase)

    # -- open / trace ---------------------------------------------------------
    def open_script(self, path: str | Path) -> None:
        win = self.window
        path = Path(path).expanduser().resolve()
        if path.suffix.lower() == RUN_EXTENSION:  # a recorded run, not a script: the runs extension opens it
            self._open_run(path)
            return
        self.document.path = path
        if path.is_file():
            win.recent.add(path)
        win.reload_bar.hide()
        win.watcher.watch(path)
        self.layouter.cancel()
        self._after_view.clear()
        win.files.update_title()
        self.tracer.submit(trace_job(path, AUTO_BOXES))
        self.set_busy("loading script")

    def show_graph(self, graph, path: str | Path) -> None:
        """Show a graph that was not traced here (e.g. from a run file): group and lay
        it out off the UI thread, then display it like a fresh trace."""
        self.document.path = Path(path)
        self.layouter.cancel()
        self._after_view.clear()
        self.tracer.submit(graph_job(Path(path), graph, AUTO_BOXES))
        self.set_busy("laying out the graph")

    def _open_run(self, path: Path) -> None:
        try:
            from gradviz.app.runs import open_run_file
        except ModuleNotFoundError as exc:
            self.window.show_error(f"cannot open run files in this build: {exc}")
            return
        open_run_file(self.window, path)

    def reload(self) -> None:
        if self.document.path is not None:
            self.open_script(self.document.path)

    def _on_traced(self, gen: int, result: TraceResult) -> None:
        if not self.tracer.is_current(gen):
            return
        win, doc = self.window, self.document
        doc.set_trace(result)
        win.selection.selected = ""
        win.error_dock.hide()
        self.set_busy(None)
        win.files.update_title()
        win.outline.set_modules(doc.modules, doc.expanded, self.color_scale(), doc.graph)
        self.show_view(fit=True)
        win.inspector.show_summary(doc.graph)
        win.graphChanged.emit(doc.graph)
        win.nodeSelected.emit("")

    def _on_trace_failed(self, gen: int, exc: BaseException, tb: str) -> None:
        if not self.tracer.is_current(gen):
            return
        win, doc = self.window, self.document
        self.set_busy(None)
        win.files.update_title()
        win.show_error(exc, details=tb)
        if doc.graph is None:
            name = doc.path.name if doc.path else "the script"
            win.view.set_placeholder(f"Could not open {name} — see the Errors panel.\n"
                                     "Fix it and press Ctrl+R, or open another script.")
        win.statusBar().showMessage("trace failed — see the Errors panel", 8000)
        win.traceFailed.emit(exc)

    # -- grouping -------------------------------------------------------------
    def set_expanded(self, expanded: set[str], then: Callable[[], None] | None = None) -> None:
        """Re-collapse and re-lay out (off the UI thread); ``then`` runs once it is shown."""
        if self.document.graph is None:
            return
        self._after_view = [then] if then else []
        self.layouter.submit(view_job(self.document.graph, expanded))
        self.set_busy("layout")

    def expand(self, module: str, then=None) -> None:
        self.set_expanded(self.document.expanded_with(module), then or (lambda: self.focus_module(module)))

    def collapse(self, module: str, then=None) -> None:
        gid = f"group:{module}"
        self.set_expanded(self.document.expanded_without(module),
                          then or (lambda: self.window.select_nodes([gid], center=True)))

    def reset_grouping(self) -> None:
        from gradviz.core.grouping import auto_depth, expanded_to_depth

        g = self.document.graph
        if g is not None:
            self.set_expanded(expanded_to_depth(g, auto_depth(g, AUTO_BOXES)))

    def reveal(self, nid: str) -> None:
        """Select ``nid`` (a full-graph id), expanding the groups that hide it."""
        doc, win = self.document, self.window
        if doc.view is None:
            return
        if nid not in doc.view:
            needed = doc.expanded_to_show(nid)
            if needed != doc.expanded:
                self.set_expanded(needed, lambda: win.select_nodes([nid], center=True))
                return
        win.select_nodes([nid], center=True)

    def focus_module(self, module: str) -> None:
        members = [n for n, a in self.document.view.nodes(data=True)
                   if a.get("module", "") == module or a.get("module", "").startswith(module + ".")]
        if members:
            self.window.selection.center_on(members)

    def _on_view(self, gen: int, result: ViewResult) -> None:
        if not self.layouter.is_current(gen):
            return
        win = self.window
        self.set_busy(None)
        self.document.set_view(result)
        win.outline.set_expanded(self.document.expanded)
        keep = win.selection.selected
        self.show_view(fit=False)
        callbacks, self._after_view = self._after_view, []
        if callbacks:
            for cb in callbacks:
                cb()
        elif keep:
            win.select_nodes([keep], center=False)

    def _on_layout_failed(self, gen: int, exc: BaseException, tb: str) -> None:
        if self.layouter.is_current(gen):
            self.set_busy(None)
            self.window.show_error(exc, details=tb, title="Layout failed")

    # -- on screen ------------------------------------------------------------
    def show_view(self, fit: bool) -> None:
        win, doc = self.window, self.document
        scene = win.scene
        scene.set_graph(doc.view, doc.layout)
        # one range for every grouping of the graph; it follows live norms unless the user fixed it
        rng = doc.fixed_range or doc.norm_range()
        if rng is not None:
            scene.set_color_range(*rng, follow=doc.fixed_range is None)
        if doc.norms:
            scene.set_norms(doc.view_norms(doc.norms))
        if doc.live_loss is not None:
            scene.set_loss(doc.live_loss)
        for style, edges in doc.marked_edges.items():
            scene.mark_edges(doc.view_edges(edges), style)
        for style, ids in doc.marked_nodes.items():
            scene.mark_nodes(doc.view_nodes(ids), style)
        win.view.set_placeholder(None)
        win.overlays.place()
        if fit:
            win.view.fit()
        else:
            win.view.fitted = False   # a re-grouped graph keeps the user's zoom and place
        win.minimap.render_scene()
        win.overlays.place()
        win.status.set_run(doc.run, doc.view.number_of_nodes())
        win.search.refresh()
        win.graphShown.emit()

    def set_node_norms(self, norms: dict) -> None:
        self.document.norms.update(norms)
        self.window.scene.set_norms(self.document.view_norms(norms))
        # the module tree and the summary follow too, at most a few times a second
        if not self._panels_timer.isActive():
            self._panels_timer.start()

    def set_loss(self, value: float) -> None:
        self.document.live_loss = value
        self.window.scene.set_loss(value)
        if not self._panels_timer.isActive():
            self._panels_timer.start()

    def _refresh_panels(self) -> None:
        win, doc = self.window, self.document
        if doc.graph is None:
            return
        if doc.norms:
            win.outline.update_norms(doc.norms, win.scene.color_scale())
        if not win.selection.selected and (doc.norms or doc.live_loss is not None):
            win.inspector.show_summary(doc.graph, doc.norms, doc.live_loss)

    def mark_edges(self, edges: list[tuple[str, str]], style: str = "broken") -> None:
        self.document.marked_edges.setdefault(style, []).extend(edges)
        self.window.scene.mark_edges(self.document.view_edges(edges), style)

    def mark_nodes(self, ids: list[str], style: str = "nan-origin") -> None:
        self.document.marked_nodes.setdefault(style, []).extend(ids)
        self.window.scene.mark_nodes(self.document.view_nodes(ids), style)

    def color_scale(self):
        from gradviz.core.colors import LogColorScale

        return LogColorScale(*(self.document.norm_range() or (1e-6, 1.0)))

    def shutdown(self, wait_ms: int = 30000) -> bool:
        """Stop the worker threads; False when a job is still running after ``wait_ms``."""
        ok = self.tracer.stop(wait_ms)
        return self.layouter.stop(wait_ms) and ok
