"""The current document on screen: scene, overview map, module tree, inspector summary, status
bar, search, title and placeholder all follow the document the session holds.

``GraphSync`` listens to ``Session.documentChanged`` (a new document: everything shown of
the old one goes at once) and ``Session.documentEdited`` (the current document changed:
a new view, live norms, a loss, marks, a colour range, a failure). It never reads a
document that is not current: the session mutes those.
"""
from __future__ import annotations

import logging
from typing import Protocol

import networkx as nx
from PySide6.QtCore import QTimer, SignalInstance

from gradviz.app.document import Document
from gradviz.app.inspector_panel import InspectorPanel
from gradviz.app.inspector_sync import show_selection
from gradviz.app.step_values import refresh_folds
from gradviz.app.minimap import Minimap
from gradviz.app.outline_panel import OutlinePanel
from gradviz.app.overlays import Overlays
from gradviz.app.search_bar import SearchBar
from gradviz.app.session import Session
from gradviz.app.status_bar import StatusBar
from gradviz.app.graph_view import GraphView
from gradviz.core.output.colors import LogColorScale
from gradviz.core.layout.types import Layout
from gradviz.render.scene.scene import GraphScene

log = logging.getLogger(__name__)

PANELS_REFRESH_MS = 200  # live norms repaint the module tree and the summary at most this often
EMPTY_TEXT = "Open a model script (File ▸ Open, Ctrl+O) or drop a .py file here."


class SyncHost(Protocol):
    """What ``GraphSync`` paints and tells (the main window)."""

    scene: GraphScene
    view: GraphView
    minimap: Minimap
    overlays: Overlays
    outline: OutlinePanel
    inspector: InspectorPanel
    status: StatusBar
    search: SearchBar
    graphChanged: SignalInstance
    graphShown: SignalInstance
    traceFailed: SignalInstance

    def show_error(self, error, details: str = "", title: str | None = None) -> None: ...

    def hide_errors(self) -> None: ...

    def show_message(self, text: str, ms: int = 5000) -> None: ...

    def setWindowTitle(self, title: str) -> None: ...


def empty_layout() -> Layout:
    return Layout(pos={}, size={}, edges={}, layer={}, width=0.0, height=0.0)


def window_title(doc: Document) -> str:
    """The document's name (the platform appends the application's name: "x.py — gradviz")."""
    if doc.path is None:
        return "gradviz"
    if doc.status == "failed":
        return f"{doc.name} (could not open)"
    return doc.name


class GraphSync:
    def __init__(self, host: SyncHost, session: Session) -> None:
        self.host = host
        self.session = session
        session.documentChanged.connect(self.show_document)
        session.documentEdited.connect(self.document_edited)
        session.phaseChanged.connect(host.status.set_busy_phase)
        self._panels_timer = QTimer(host.scene)
        self._panels_timer.setSingleShot(True)
        self._panels_timer.setInterval(PANELS_REFRESH_MS)
        self._panels_timer.timeout.connect(self._refresh_panels)

    @property
    def document(self) -> Document:
        return self.session.document

    # -- a new document: nothing of the old one stays ----------------------------------
    def show_document(self, doc: Document) -> None:
        h = self.host
        self._panels_timer.stop()
        h.scene.set_graph(nx.DiGraph(), empty_layout())
        h.scene.clear_highlight()
        h.minimap.render_scene()
        h.overlays.place()
        h.outline.set_modules({}, set())
        h.inspector.show_node("", {})
        h.status.set_run({"script": str(doc.path) if doc.path else None})
        h.status.set_step(None, "")
        h.search.refresh()
        h.hide_errors()
        h.status.clearMessage()          # a message about the previous document ("could not open x.py") goes too
        h.setWindowTitle(window_title(doc))
        h.view.set_placeholder(f"Loading {doc.name}…" if doc.status == "loading" else EMPTY_TEXT)

    def document_edited(self, doc: Document, what: str, info: dict) -> None:
        handler = {"status": self._status, "graph": self._graph, "view": self._view, "norms": self._norms,
                   "loss": self._loss, "marks": self._marks, "range": self._range, "stats": self._stats,
                   "model-step": self._model_step}.get(what)
        if handler is not None:
            handler(doc, info)

    def _status(self, doc: Document, _info: dict) -> None:
        h = self.host
        h.setWindowTitle(window_title(doc))
        if doc.status != "failed":
            return
        h.scene.set_graph(nx.DiGraph(), empty_layout())
        h.minimap.render_scene()
        h.overlays.place()
        h.view.set_placeholder(f"Could not open {doc.name} — see the Errors panel.\n"
                               "Fix it and press Ctrl+R, or open another script.")
        h.show_error(doc.error, details=doc.error_details)
        h.show_message(f"could not open {doc.name} — see the Errors panel", 8000)
        h.traceFailed.emit(doc.error)

    def _graph(self, doc: Document, _info: dict) -> None:
        h = self.host
        h.outline.set_modules(doc.modules, doc.expanded, self.color_scale(), doc.graph)
        show_selection(h.inspector, doc)
        h.graphChanged.emit(doc.graph)

    def _view(self, doc: Document, info: dict) -> None:
        self.host.outline.set_expanded(doc.expanded)
        self.show_view(doc, fit=info.get("fit", False))
        if doc.selected and doc.selected not in doc.view:
            # its box is gone (a fold unfolded, a group opened): the box holding it now, or nothing —
            # never the Inspector of a box no longer drawn
            doc.select([doc.selected], center=False)

    # -- on screen ---------------------------------------------------------------------
    def show_view(self, doc: Document, fit: bool) -> None:
        h = self.host
        scene = h.scene
        scene.set_graph(doc.view, doc.layout)
        # one range for every grouping of the graph; it follows live norms unless the user fixed it
        rng = doc.fixed_range or doc.norm_range()
        if rng is not None:
            scene.set_color_range(*rng, follow=doc.fixed_range is None)
        if doc.norms:
            refresh_folds(doc)
            scene.set_norms(doc.view_norms(doc.norms), doc.norms_step, doc.norms_source)
        if doc.live_loss is not None:
            scene.set_loss(doc.live_loss, doc.loss_step)
        self._marks(doc, {})
        h.view.set_placeholder(None)
        h.overlays.place()
        if fit:
            h.view.fit()
        else:
            h.view.update_canvas()   # a re-grouped graph keeps the user's zoom (the window keeps the place)
        h.view.viewport().update()   # every pixel: nothing of the previous drawing may stay
        h.minimap.render_scene()
        h.overlays.place()
        h.status.set_run(doc.run, doc.view.number_of_nodes())
        h.status.set_step(doc.step, doc.norms_source, doc.model_step)
        h.search.refresh()
        h.graphShown.emit()

    def _norms(self, doc: Document, info: dict) -> None:
        refresh_folds(doc)            # the fold boxes' sparklines draw this step's per-repeat norms
        self.host.scene.set_norms(doc.view_norms(info.get("norms", {})), doc.norms_step, doc.norms_source)
        self.host.status.set_step(doc.step, doc.norms_source, doc.model_step)
        # the module tree and the summary follow too, at most a few times a second
        if not self._panels_timer.isActive():
            self._panels_timer.start()

    def _loss(self, doc: Document, _info: dict) -> None:
        self.host.scene.set_loss(doc.live_loss, doc.loss_step)
        if not self._panels_timer.isActive():
            self._panels_timer.start()

    def settled(self) -> bool:
        """No refresh of the panels is waiting (tests, the report)."""
        return not self._panels_timer.isActive()

    def _refresh_panels(self) -> None:
        h, doc = self.host, self.document
        if doc.graph is None:
            return
        if doc.norms:
            h.outline.update_norms(doc.norms, h.scene.color_scale())
        show_selection(h.inspector, doc)     # the selected node too: never a number of an older step

    def _marks(self, doc: Document, _info: dict) -> None:
        scene = self.host.scene
        if doc.view is None:
            return
        scene.clear_marks()
        for style, edges in doc.marked_edges.items():
            scene.mark_edges(doc.view_edges(edges), style)
        for style, ids in doc.marked_nodes.items():
            scene.mark_nodes(doc.view_nodes(ids), style)

    def _range(self, doc: Document, _info: dict) -> None:
        if doc.fixed_range is not None:
            self.host.scene.set_color_range(*doc.fixed_range)
        else:
            self.host.scene.set_color_range(None)

    def _stats(self, doc: Document, info: dict) -> None:
        nid = info.get("nid")
        if nid and doc.selected == nid:
            show_selection(self.host.inspector, doc)

    def _model_step(self, doc: Document, _info: dict) -> None:
        self.host.status.set_step(doc.step, doc.norms_source, doc.model_step)
        if not self._panels_timer.isActive():
            self._panels_timer.start()

    def color_scale(self) -> LogColorScale:
        return LogColorScale(*(self.document.norm_range() or (1e-6, 1.0)))
