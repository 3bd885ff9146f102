"""Selection and highlighting, and what the user does on the graph to change them:
clicks, double-clicks, arrow keys, the right-click menu and the Modules outline.

``selection.py`` decides *what* to highlight (pure networkx); this puts it on the
scene, the inspector and the outline, and emits ``window.nodeSelected``.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu

from gradviz.app.selection import highlight_for, neighbour


class Interaction:
    def __init__(self, window) -> None:
        self.window = window
        self.document = window.document
        self.selected = ""     # the node id in focus ('' = nothing selected)
        view, scene = window.view, window.scene
        view.customContextMenuRequested.connect(self.context_menu)
        view.navigate.connect(self.navigate)
        view.cleared.connect(lambda: self.select([]))
        scene.nodeClicked.connect(lambda nid: self.select([nid], center=False))
        scene.nodeDoubleClicked.connect(self.double_clicked)
        scene.backgroundClicked.connect(lambda: self.select([], center=False))
        window.outline.expandToggled.connect(self.outline_toggled)
        window.outline.moduleActivated.connect(self.outline_activated)

    # -- selection ------------------------------------------------------------
    def select(self, ids: list[str], center: bool = True) -> None:
        win, doc, scene = self.window, self.document, self.window.scene
        visible = doc.view_nodes(list(ids)) if doc.view is not None else []
        if not visible:
            self.selected = ""
            scene.clear_highlight()
            scene.clearSelection()
            win.inspector.show_summary(doc.graph)
            win.nodeSelected.emit("")
            return
        nid = visible[0]
        if len(visible) == 1:
            nodes, edges = highlight_for(doc.view, nid)
        else:
            nodes, edges = set(visible), set()
        self.selected = nid
        scene.highlight(nodes, edges)
        scene.blockSignals(True)
        scene.clearSelection()
        for v in visible:
            item = scene.node_item(v)
            if item is not None:
                item.setSelected(True)
        scene.blockSignals(False)
        win.inspector.show_node(nid, doc.node(nid), doc.graph)
        if doc.view.nodes[nid].get("kind") == "group":
            win.outline.select_module(doc.view.nodes[nid].get("module", ""))
        if center:
            self.center_on(visible)
        win.nodeSelected.emit(nid)

    def center_on(self, ids: list[str]) -> None:
        lay = self.document.layout
        rect = QRectF()
        for n in ids:
            if lay is not None and n in lay.pos:
                (x, y), (w, h) = lay.pos[n], lay.size[n]
                rect = rect.united(QRectF(x - w / 2, y - h / 2, w, h))
        if rect.isNull():
            return
        self.window.view.center_on_rect(rect)

    def node_at(self, scene_pt: QPointF) -> str | None:
        return self.window.scene.node_at(scene_pt)

    # -- user input -----------------------------------------------------------
    def double_clicked(self, nid: str) -> None:
        attrs = self.document.node(nid)
        if attrs.get("kind") == "group":
            self.window.expand(attrs.get("module", ""))

    def navigate(self, direction: str) -> None:
        doc = self.document
        if doc.view is None:
            return
        if not self.selected or self.selected not in doc.view:
            roots = [r for r in doc.view.graph.get("roots", []) if r in doc.view]
            if roots:
                self.select(roots[:1])
            return
        nxt = neighbour(doc.view, doc.layout, self.selected, direction)
        if nxt:
            self.select([nxt], center=False)
            (x, y), (w, h) = doc.layout.pos[nxt], doc.layout.size[nxt]
            self.window.view.ensureVisible(QRectF(x - w / 2, y - h / 2, w, h), 80, 80)

    def context_menu_for(self, nid: str | None) -> QMenu:
        """The right-click menu of node ``nid`` (or of the background when None)."""
        win, doc = self.window, self.document
        menu = QMenu(win)
        if nid:
            attrs = doc.node(nid)
            self.select([nid], center=False)
            if attrs.get("kind") == "group":
                menu.addAction("Expand", lambda: win.expand(attrs.get("module", "")))
            parent = doc.parent_module(nid)
            if parent:
                act = menu.addAction(f"Collapse parent ({parent})", lambda: win.collapse(parent))
                act.setEnabled(parent in doc.expanded)
            if attrs.get("location"):
                from gradviz.app.source_link import open_location
                menu.addAction("Open source", lambda: open_location(attrs["location"]))
            menu.addAction("Copy id", lambda: QGuiApplication.clipboard().setText(nid))
            menu.addSeparator()
        menu.addAction(win.act_fit)
        menu.addAction(win.act_expand_all)
        menu.addAction(win.act_reset_grouping)
        return menu

    def context_menu(self, pos) -> None:
        view = self.window.view
        menu = self.context_menu_for(self.node_at(view.mapToScene(pos)))
        menu.exec(view.mapToGlobal(pos))

    def outline_toggled(self, module: str, expanded: bool) -> None:
        if expanded:
            self.window.expand(module)
        else:
            self.window.collapse(module)

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
