"""Selection and highlighting, and what the user does on the graph to change them:
clicks, double-clicks, arrow keys, the right-click menu and the Modules outline.

``selection.py`` decides *what* to highlight (pure networkx); this puts it on the
scene, the inspector and the outline, and emits ``nodeSelected``. A selection is the
current document's (``doc.select`` → the session's ``"selection"`` event → here): a panel
of another document cannot select anything on screen.
"""
from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QPointF, QRectF, SignalInstance
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu, QWidget

from gradviz.app import fold_actions
from gradviz.app.actions import WindowActions
from gradviz.app.details_fetcher import DetailsFetcher
from gradviz.app.document import Document
from gradviz.app.graph_view import GraphView
from gradviz.app.inspector_sync import show_selection
from gradviz.app.inspector_panel import InspectorPanel
from gradviz.app.outline_panel import OutlinePanel
from gradviz.app.selection import highlight_for, neighbour
from gradviz.app.session import Session
from gradviz.render.scene.scene import GraphScene


class InteractionHost(Protocol):
    """What ``Interaction`` uses of the window."""

    scene: GraphScene
    view: GraphView
    inspector: InspectorPanel
    outline: OutlinePanel
    acts: WindowActions
    nodeSelected: SignalInstance

    def expand(self, module: str, then=None) -> None: ...

    def collapse(self, module: str, then=None) -> None: ...


class Interaction:
    def __init__(self, host: InteractionHost, session: Session, menu_parent: QWidget) -> None:
        self.host = host
        self.session = session
        self.details = DetailsFetcher(session)
        self.shown_ids: list[str] = []        # the view nodes selected (a finding selects several)
        self._menu_parent = menu_parent
        view, scene = host.view, host.scene
        view.customContextMenuRequested.connect(self.context_menu)
        view.navigate.connect(self.navigate)
        view.cleared.connect(lambda: self.select([]))
        scene.nodeClicked.connect(lambda nid: self.select([nid], center=False))
        scene.nodeDoubleClicked.connect(self.double_clicked)
        scene.backgroundClicked.connect(lambda: self.select([], center=False))
        host.outline.expandToggled.connect(self.outline_toggled)
        host.outline.moduleActivated.connect(self.outline_activated)
        session.documentEdited.connect(self._edited)

    @property
    def document(self) -> Document:
        return self.session.document

    @property
    def selected(self) -> str:
        return self.document.selected

    def _edited(self, doc: Document, what: str, info: dict) -> None:
        if what == "selection":
            self.select(info["ids"], info.get("center", True))

    # -- selection ------------------------------------------------------------
    def select(self, ids: list[str], center: bool = True) -> None:
        host, doc, scene = self.host, self.document, self.host.scene
        visible = doc.view_nodes(list(ids)) if doc.view is not None else []
        if not visible:
            self.shown_ids = []
            doc.selected = ""
            scene.clear_highlight()
            scene.clearSelection()
            host.outline.clear_selection()          # the tree highlights nothing the graph does not
            show_selection(host.inspector, doc)
            host.nodeSelected.emit("")
            return
        nid = visible[0]
        self.shown_ids = list(visible)
        if len(visible) == 1:
            nodes, edges = highlight_for(doc.view, nid)
        else:         # several (a finding's nodes): they and the edges between them stand out
            nodes = set(visible)
            edges = {(u, v) for u, v in doc.view.edges() if u in nodes and v in nodes}
        doc.selected = nid
        scene.highlight(nodes, edges)
        scene.blockSignals(True)
        scene.clearSelection()
        for v in visible:
            item = scene.node_item(v)
            if item is not None:
                item.setSelected(True)
        scene.blockSignals(False)
        show_selection(host.inspector, doc, self.details.request)
        if doc.view.nodes[nid].get("kind") == "group":
            host.outline.select_module(doc.view.nodes[nid].get("module", ""))
        if center:
            self.center_on(visible)
        host.nodeSelected.emit(nid)

    def nodes_rect(self, ids: list[str]) -> QRectF:
        """The scene rectangle holding the boxes of view nodes ``ids`` (null when none is laid out)."""
        lay = self.document.layout
        rect = QRectF()
        for n in ids:
            if lay is not None and n in lay.pos:
                (x, y), (w, h) = lay.pos[n], lay.size[n]
                rect = rect.united(QRectF(x - w / 2, y - h / 2, w, h))
        return rect

    # -- keeping the user's place through a re-grouping -----------------------------
    def anchor(self) -> tuple[str, QPointF] | None:
        """What the user looks at, and where on screen: the selected node, else the node nearest
        the middle of the view (a view id), with its centre in viewport coordinates."""
        doc, view = self.document, self.host.view
        if doc.view is None or doc.layout is None or not doc.layout.pos:
            return None
        nid = doc.selected if doc.selected in doc.layout.pos else None
        if nid is None:
            centre = view.mapToScene(view.viewport().rect().center())
            nid = min(doc.layout.pos, key=lambda n: (doc.layout.pos[n][0] - centre.x()) ** 2
                      + (doc.layout.pos[n][1] - centre.y()) ** 2)
        x, y = doc.layout.pos[nid]
        return nid, QPointF(view.mapFromScene(QPointF(x, y)))

    def restore(self, anchor: tuple[str, QPointF] | None, selected: str) -> None:
        """After a re-grouping: the selection again (its box, if it was folded into one), and
        the anchor's node — or the box now holding it, or its members when its box opened —
        back at the same place on screen."""
        doc, view = self.document, self.host.view
        if selected:
            keep = doc.visible_id(selected)
            self.select([keep] if keep else [], center=False)
        if anchor is None:
            return
        nid, at = anchor
        shown = doc.visible_id(nid)
        ids = [shown] if shown else self.members(nid)
        rect = self.nodes_rect(ids)
        if rect.isNull():
            return
        view.update_canvas()
        scale = view.scale_factor()
        middle = QPointF(view.viewport().rect().center())
        view.centerOn(rect.center() + (middle - at) / scale)
        view.viewportMoved.emit()

    def members(self, nid: str) -> list[str]:
        """View nodes of the module a ``group:`` id stood for (after it was expanded)."""
        if not nid.startswith("group:") or self.document.view is None:
            return []
        module = nid[len("group:"):]
        return [n for n, a in self.document.view.nodes(data=True)
                if a.get("module", "") == module or a.get("module", "").startswith(module + ".")]

    def center_on(self, ids: list[str]) -> None:
        rect = self.nodes_rect(ids)
        if rect.isNull():
            return
        view = self.host.view
        view.center_on_rect(rect)
        focus = self.nodes_rect(ids[:1])
        if not view.visible_scene_rect().contains(focus):
            view.center_on_rect(focus)   # the nodes span more than the screen: the one in focus first

    def node_at(self, scene_pt: QPointF) -> str | None:
        return self.host.scene.node_at(scene_pt)

    # -- user input -----------------------------------------------------------
    def double_clicked(self, nid: str) -> None:
        attrs = self.document.node(nid)
        if attrs.get("fold"):
            fold_actions.unfold(self.session, self.document, attrs, "all")
        elif attrs.get("kind") == "group":
            self.host.expand(attrs.get("module", ""))

    def navigate(self, direction: str) -> None:
        doc = self.document
        if doc.view is None:
            return
        if not doc.selected or doc.selected not in doc.view:
            roots = [r for r in doc.view.graph.get("roots", []) if r in doc.view]
            if roots:
                self.select(roots[:1])
            return
        nxt = neighbour(doc.view, doc.layout, doc.selected, direction)
        if nxt:
            self.select([nxt], center=False)
            (x, y), (w, h) = doc.layout.pos[nxt], doc.layout.size[nxt]
            self.host.view.ensureVisible(QRectF(x - w / 2, y - h / 2, w, h), 80, 80)

    def context_menu_for(self, nid: str | None) -> QMenu:
        """The right-click menu of node ``nid`` (or of the background when None)."""
        host, doc = self.host, self.document
        menu = QMenu(self._menu_parent)
        if nid:
            attrs = doc.node(nid)
            self.select([nid], center=False)
            if attrs.get("fold"):
                fold_actions.add_to_menu(menu, self.session, doc, attrs)
            elif attrs.get("kind") == "group":
                menu.addAction("Expand", lambda: host.expand(attrs.get("module", "")))
            parent = doc.parent_module(nid)
            if parent:
                act = menu.addAction(f"Collapse parent ({parent})", lambda: host.collapse(parent))
                act.setEnabled(parent in doc.expanded)
            if attrs.get("location"):
                from gradviz.app.source_link import open_location
                menu.addAction("Open source", lambda: open_location(attrs["location"]))
            menu.addAction("Copy id", lambda: QGuiApplication.clipboard().setText(nid))
            menu.addSeparator()
        for act in (host.acts.fit, host.acts.expand_all, host.acts.collapse_all, host.acts.reset_grouping):
            menu.addAction(act)
        return menu

    def context_menu(self, pos) -> None:
        view = self.host.view
        menu = self.context_menu_for(self.node_at(view.mapToScene(pos)))
        menu.exec(view.mapToGlobal(pos))

    def outline_toggled(self, module: str, expanded: bool) -> None:
        if expanded:
            self.host.expand(module)
        else:
            self.host.collapse(module)

    def outline_activated(self, module: str) -> None:
        doc = self.document
        if doc.view is None:
            return
        gid = doc.visible_id(f"group:{module}") if module else None
        if gid and gid in doc.view:
            self.select([gid])
            return
        members = [n for n, a in doc.view.nodes(data=True)
                   if module == "" or a.get("module", "") == module or a.get("module", "").startswith(module + ".")]
        if members:
            self.select(members)
