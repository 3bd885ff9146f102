"""What is drawn over the graph: the highlight of a selection's neighbourhood and the
diagnosis marks (dashed cut edges, round "!" badges). The legend draws the same marks
with ``paint_badge`` / ``mark_pen`` so its entries look exactly like the graph's."""
from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QGraphicsPathItem

from gradviz.core.output.marks import Marks
from gradviz.render.parts.clipped_paths import ClippedPathItem
from gradviz.render.parts.edges import edge_path
from gradviz.render.parts.scene_reads import MarkHost
from gradviz.render.primitives import style

MARK_COLORS = {"nan-origin": "#dc2626", "error": "#dc2626", "warning": "#f59e0b", "info": "#2563eb",
               "dead": "#6b7280", "cut-branch": "#9ca3af", "failed": "#dc2626"}
BADGE_R = 8.0


def badge_text(style_name: str) -> str:
    return "!" if style_name in ("nan-origin", "error", "warning", "failed") else "•"


def paint_badge(painter: QPainter, center: QPointF, style_name: str) -> None:
    """The round badge of a marked node, centred at ``center`` (screen-sized: 16 px)."""
    painter.save()
    painter.setRenderHint(QPainter.Antialiasing)
    painter.setPen(QPen(QColor("#ffffff"), 1.5))
    painter.setBrush(QColor(MARK_COLORS.get(style_name, "#dc2626")))
    box = QRectF(center.x() - BADGE_R, center.y() - BADGE_R, 2 * BADGE_R, 2 * BADGE_R)
    painter.drawEllipse(box)
    painter.setFont(style.font(11, 700))
    painter.drawText(box, Qt.AlignCenter, badge_text(style_name))
    painter.restore()


def mark_pen(theme: style.Theme, style_name: str) -> QPen:
    """Dashed pen of a marked edge ('broken': the theme's red)."""
    color = theme.color("broken") if style_name in ("broken", "cut") else QColor(
        MARK_COLORS.get(style_name, theme.broken))
    pen = QPen(color, 2.2, Qt.DashLine)
    pen.setCapStyle(Qt.RoundCap)
    return pen


class Badge(QGraphicsItem):
    """A badge on a node that keeps its screen size at any zoom."""

    def __init__(self, style_name: str) -> None:
        super().__init__()
        self.style_name = style_name
        self.setFlag(QGraphicsItem.ItemIgnoresTransformations)
        self.setZValue(5)
        self.setToolTip(style_name)
        self._dx = 0.0

    def set_slot(self, slot: int) -> None:
        """The ``slot``-th badge on a node sits that many badges to the left (in screen pixels)."""
        self.prepareGeometryChange()
        self._dx = -2.2 * BADGE_R * slot

    def boundingRect(self) -> QRectF:
        return QRectF(self._dx - 9, -9, 18, 18)

    def paint(self, painter, option, widget=None) -> None:
        paint_badge(painter, QPointF(self._dx, 0), self.style_name)


class MarkLayer:
    """Overlay items of one scene, by name ('highlight', 'mark:<style>'), and badges by style."""

    def __init__(self, scene: MarkHost) -> None:
        self.scene = scene
        self.reset()

    def reset(self) -> None:
        """Forget the items (the scene removed them while rebuilding)."""
        self.paths: dict[str, QGraphicsPathItem] = {}
        self.badges: dict[str, list[Badge]] = {}
        self.marked_edges: dict[str, list[tuple[str, str]]] = {}
        self.marked_nodes: dict[str, list[str]] = {}

    # -- marks --------------------------------------------------------------------------
    def mark_edges(self, edges: Iterable[tuple[str, str]], style_name: str) -> None:
        edges = [tuple(e) for e in edges]
        self.marked_edges[style_name] = [e for e in edges if e[0] in self.scene.index and e[1] in self.scene.index]
        self._set_path(f"mark:{style_name}", self._edges_path(edges, straight_missing=True), z=1.6)
        self._changed()

    def mark_nodes(self, ids: Iterable[str], style_name: str) -> None:
        sc = self.scene
        for badge in self.badges.pop(style_name, []):
            sc.removeItem(badge)
        shown = [nid for nid in dict.fromkeys(ids) if nid in sc.index]
        badges = []
        taken: dict[str, int] = {}  # node -> badges of other styles already on it: go left of them
        for other in self.marked_nodes.items():
            if other[0] != style_name:
                for nid in other[1]:
                    taken[nid] = taken.get(nid, 0) + 1
        for nid in shown:
            badge = Badge(style_name)
            badge.setPos(sc.rects[sc.index[nid]].topRight())
            badge.set_slot(taken.get(nid, 0))
            sc.addItem(badge)
            badges.append(badge)
        self.badges[style_name] = badges
        self.marked_nodes[style_name] = shown
        self._changed()

    def clear_marks(self) -> None:
        for name in [k for k in self.paths if k.startswith("mark:")]:
            self._set_path(name, None)
        for name in list(self.badges):
            self.mark_nodes([], name)
        self.marked_edges, self.marked_nodes = {}, {}
        self._changed()

    def marks(self) -> Marks:
        """The marks drawn now (view ids; a style cleared with an empty list is absent)."""
        out = Marks()
        for style_name, edges in self.marked_edges.items():
            if edges:
                out.add_edges(style_name, edges)
        for style_name, ids in self.marked_nodes.items():
            if ids:
                out.add_nodes(style_name, ids)
        return out

    def _changed(self) -> None:
        self.scene.marksChanged.emit(self.scene.marks().styles())   # graph marks too

    # -- highlight ----------------------------------------------------------------------
    def highlight(self, edges: Iterable[tuple[str, str]]) -> None:
        self._set_path("highlight", self._edges_path(edges), z=1.5)

    def set_screen_sized(self, on: bool) -> None:
        """Badges keep their screen size at any zoom (``on``); an export turns it off so a badge
        scales with the picture like everything else (16 px at 1×, 32 px in a 2× PNG)."""
        for badges in self.badges.values():
            for badge in badges:
                badge.setFlag(QGraphicsItem.ItemIgnoresTransformations, on)

    def set_highlight_visible(self, visible: bool) -> None:
        item = self.paths.get("highlight")
        if item is not None:
            item.setVisible(visible)

    # -- items --------------------------------------------------------------------------
    def apply_theme(self) -> None:
        for item in self.paths.values():
            item.setPen(self._pen(item.data(0)))

    def _pen(self, name: str) -> QPen:
        if name and name.startswith("mark:"):
            return mark_pen(self.scene.theme, name[5:])
        pen = QPen(self.scene.theme.color("accent"), 2.6)
        pen.setCapStyle(Qt.RoundCap)
        return pen

    def _edges_path(self, edges: Iterable[tuple[str, str]], straight_missing: bool = False) -> QPainterPath | None:
        """One path of the edges' curves; an edge the layout lacks (a cut autograd never
        recorded) is drawn straight between the boxes when ``straight_missing``."""
        sc = self.scene
        path = QPainterPath()
        for u, v in edges:
            got = sc.edge_paths.get((u, v))
            if got is not None:
                path.addPath(got)
            elif straight_missing and u in sc.index and v in sc.index:
                a, b = sc.rects[sc.index[u]], sc.rects[sc.index[v]]
                path.addPath(edge_path([(a.center().x(), a.bottom()), (b.center().x(), b.top())]))
        return None if path.isEmpty() else path

    def _set_path(self, name: str, path: QPainterPath | None, z: float = 1.5) -> None:
        old = self.paths.pop(name, None)
        if old is not None:
            self.scene.removeItem(old)
        if path is None:
            return
        item = ClippedPathItem(path)     # strokes only what is near the view (100k-node graphs)
        item.setData(0, name)
        item.setPen(self._pen(name))
        item.setZValue(z)
        item.setAcceptedMouseButtons(Qt.NoButton)
        self.scene.addItem(item)
        self.paths[name] = item
