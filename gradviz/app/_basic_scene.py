"""A bare stand-in for ``gradviz.render.scene.GraphScene`` (same API), used only when
the render package is not importable, so the window still opens and can be tested."""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem, QGraphicsRectItem, QGraphicsScene, QGraphicsSimpleTextItem


class _Node(QGraphicsRectItem):
    def __init__(self, nid: str, rect: QRectF, label: str) -> None:
        super().__init__(rect)
        self.nid = nid
        self.setFlag(QGraphicsItem.ItemIsSelectable, True)
        text = QGraphicsSimpleTextItem(label, self)
        br = text.boundingRect()
        text.setPos(rect.center().x() - br.width() / 2, rect.center().y() - br.height() / 2)


class GraphScene(QGraphicsScene):
    nodeClicked = Signal(str)
    nodeDoubleClicked = Signal(str)
    backgroundClicked = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._nodes: dict[str, _Node] = {}
        self._edges: dict[tuple, QGraphicsPathItem] = {}
        self._range = (1e-6, 1.0)
        self._norms: dict = {}

    def set_graph(self, graph, layout) -> None:
        self.clear()
        self._nodes, self._edges = {}, {}
        for (u, v), pts in layout.edges.items():
            path = QPainterPath(QPointF(*pts[0]))
            for p in pts[1:]:
                path.lineTo(QPointF(*p))
            item = self.addPath(path, QPen(QColor("#888"), 1.2))
            self._edges[(u, v)] = item
        for nid, (x, y) in layout.pos.items():
            w, h = layout.size[nid]
            item = _Node(nid, QRectF(x - w / 2, y - h / 2, w, h), str(graph.nodes[nid].get("label", nid)))
            self.addItem(item)
            self._nodes[nid] = item
        self._norms = {n: graph.nodes[n].get("grad_norm") for n in graph}
        self._recolor()
        self.setSceneRect(self.itemsBoundingRect().adjusted(-40, -40, 40, 40))

    def _recolor(self) -> None:
        lo, hi = (math.log10(max(v, 1e-30)) for v in self._range)
        for nid, item in self._nodes.items():
            v = self._norms.get(nid)
            if v is None:
                c = QColor("#9e9e9e")
            elif not math.isfinite(v):
                c = QColor("#ff00ff")
            else:
                t = 0.0 if hi <= lo else min(max((math.log10(max(v, 1e-30)) - lo) / (hi - lo), 0), 1)
                c = QColor.fromHsvF(0.66 * (1 - t), 0.6, 0.95)
            item.setBrush(QBrush(c))

    def node_item(self, nid):
        return self._nodes.get(nid)

    def set_norms(self, norms) -> None:
        self._norms.update(norms)
        self._recolor()

    def set_color_range(self, lo, hi) -> None:
        self._range = (lo, hi)
        self._recolor()

    def highlight(self, nodes, edges) -> None:
        self.clear_highlight()
        for n in nodes:
            if n in self._nodes:
                self._nodes[n].setPen(QPen(QColor("#ff9800"), 3))
        for e in edges:
            if e in self._edges:
                self._edges[e].setPen(QPen(QColor("#ff9800"), 2.5))

    def clear_highlight(self) -> None:
        for item in self._nodes.values():
            item.setPen(QPen(Qt.black, 1))
        for item in self._edges.values():
            item.setPen(QPen(QColor("#888"), 1.2))

    def mark_edges(self, edges, style="broken") -> None:
        for e in edges:
            if e in self._edges:
                self._edges[e].setPen(QPen(QColor("#e53935"), 2, Qt.DashLine))

    def mark_nodes(self, ids, style="nan-origin") -> None:
        for n in ids:
            if n in self._nodes:
                self._nodes[n].setPen(QPen(QColor("#e53935"), 3))

    def graph_rect(self) -> QRectF:
        return self.itemsBoundingRect()

    def mousePressEvent(self, event) -> None:
        super().mousePressEvent(event)
        item = self._node_at(event.scenePos())
        if event.button() == Qt.LeftButton:
            if item is not None:
                self.nodeClicked.emit(item.nid)
            else:
                self.backgroundClicked.emit()

    def mouseDoubleClickEvent(self, event) -> None:
        super().mouseDoubleClickEvent(event)
        item = self._node_at(event.scenePos())
        if item is not None:
            self.nodeDoubleClicked.emit(item.nid)

    def _node_at(self, pos):
        for item in self.items(pos):
            while item is not None and not isinstance(item, _Node):
                item = item.parentItem()
            if item is not None:
                return item
        return None
