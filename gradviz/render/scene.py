"""``GraphScene``: the one renderer of a laid-out graph, used by the window and by image export.

Per node the scene keeps parallel lists (rect, kind, colours, text) indexed by the
node's position; ``NodeItem`` (hit-testing, selection) and the batch items that paint
read them. Recolouring (``set_norms``) therefore touches lists and repaints batches; it
never rebuilds items, so it is cheap enough to run on every training step.
"""
from __future__ import annotations

from typing import Hashable, Iterable, Mapping

import networkx as nx
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPainterPath, QPen
from PySide6.QtWidgets import (QGraphicsItem, QGraphicsPathItem, QGraphicsScene, QGraphicsSceneMouseEvent,
                               QToolTip)

from gradviz.core.colors import LogColorScale, auto_range, text_color_for
from gradviz.core.export import shape_text
from gradviz.core.layout import Layout
from gradviz.render import style
from gradviz.render.items import EdgeBatch, NodeBatch, NodeItem
from gradviz.render.node_paint import NodePainter, darker, secondary_text

NODES_PER_BATCH = 96
EDGES_PER_BATCH = 160
ARROW_LEN, ARROW_HALF_W = 7.0, 3.6
MARGIN = 24.0
MARK_COLORS = {"nan-origin": "#dc2626", "error": "#dc2626", "warning": "#f59e0b", "info": "#2563eb",
               "dead": "#6b7280"}


class Badge(QGraphicsItem):
    """A round marker (e.g. where NaN first appeared) that keeps its screen size at any zoom."""

    def __init__(self, color: str, text: str = "!") -> None:
        super().__init__()
        self._color = QColor(color)
        self._text = text
        self.setFlag(QGraphicsItem.ItemIgnoresTransformations)
        self.setZValue(5)

    def boundingRect(self) -> QRectF:
        return QRectF(-9, -9, 18, 18)

    def paint(self, painter, option, widget=None) -> None:
        painter.setRenderHint(painter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor("#ffffff"), 1.5))
        painter.setBrush(self._color)
        painter.drawEllipse(QRectF(-8, -8, 16, 16))
        painter.setFont(style.font(11, 700))
        painter.drawText(QRectF(-8, -8, 16, 16), Qt.AlignCenter, self._text)


class GraphScene(QGraphicsScene):
    nodeClicked = Signal(str)
    nodeDoubleClicked = Signal(str)
    backgroundClicked = Signal()
    colorScaleChanged = Signal(object)  # the new LogColorScale

    def __init__(self, parent=None, theme: str | style.Theme = "light") -> None:
        super().__init__(parent)
        self.theme = style.theme(theme)
        self.force_detail = False  # image export: full detail at any scale
        self.graph: nx.DiGraph | None = None
        self.layout: Layout | None = None
        self._scale = LogColorScale()
        self._fixed_range = False
        self._clear_data()
        self._node_painter = NodePainter(self)
        self.fonts = {"label": style.label_font(), "small": style.small_font(), "header": style.header_font(),
                      "edge": style.font(style.SMALL_PX - 0, 400)}
        self._apply_theme()

    # -- state -------------------------------------------------------------------------
    def _clear_data(self) -> None:
        self.ids: list[str] = []
        self.keys: list[Hashable] = []  # the graph's own node keys (ids may not be strings)
        self.index: dict[Hashable, int] = {}
        self.rects: list[QRectF] = []
        self.kinds: list[str] = []
        self.reachable: list[bool] = []
        self.norms: list[float | None] = []
        self.fill_colors: list[QColor] = []
        self.text_colors: list[QColor] = []
        self.secondary_colors: list[QColor] = []
        self.header_colors: list[QColor] = []
        self._lines: list[tuple[str, str]] = []
        self._elided: dict[int, tuple[str, str]] = {}
        self.items_by_id: dict[str, NodeItem] = {}
        self.node_batches: list[NodeBatch] = []
        self.batch_of: list[NodeBatch] = []
        self.edge_batches: list[EdgeBatch] = []
        self.edge_paths: dict[tuple, QPainterPath] = {}
        self.selected: set[int] = set()
        self.hl_nodes: set[int] = set()
        self._dim: set[int] | None = None
        self._overlays: dict[str, QGraphicsItem] = {}
        self._badges: dict[str, list[QGraphicsItem]] = {}
        self._rect = QRectF()

    def _apply_theme(self) -> None:
        t = self.theme
        hair = QPen(t.color("edge"), 0)  # width 0 = cosmetic 1 px, the cheapest pen
        edge = QPen(t.color("edge"), 1.25)
        edge.setCapStyle(Qt.RoundCap)
        dashed = QPen(t.color("unreachable"), 1.6, Qt.DashLine)
        self.pens = {
            "edge": edge, "edge_hairline": hair, "edge_label": QPen(t.color("edge_label")),
            "op": QPen(t.color("outline"), 1.0), "leaf": QPen(t.color("outline"), 1.2, Qt.DotLine),
            "param": QPen(t.color("strong_outline"), 2.4), "strong": QPen(t.color("strong_outline"), 1.6),
            "unreachable": dashed, "selected": QPen(t.color("accent"), 3.0),
            "highlight": QPen(t.color("accent"), 2.4),
        }
        self.brushes = {"edge": QBrush(t.color("edge"))}
        self.setBackgroundBrush(t.color("background"))
        self.update()

    def set_theme(self, theme: str | style.Theme) -> None:
        self.theme = style.theme(theme)
        self._apply_theme()
        for overlay in self._overlays.values():
            if isinstance(overlay, QGraphicsPathItem):
                overlay.setPen(self._overlay_pen(overlay.data(0)))

    # -- building -----------------------------------------------------------------------
    def set_graph(self, graph: nx.DiGraph, layout: Layout) -> None:
        """Replace the scene's content by ``graph`` drawn at ``layout``'s positions."""
        self._clear_data()  # first: removing items may report selection changes
        self.clear()
        self.graph, self.layout = graph, layout
        for nid, attrs in graph.nodes(data=True):
            if nid not in layout.pos:
                continue
            (cx, cy), (w, h) = layout.pos[nid], layout.size[nid]
            self.index[nid] = len(self.ids)
            if not isinstance(nid, str):
                self.index.setdefault(str(nid), len(self.ids))  # NodeItem ids are strings
            self.ids.append(str(nid))
            self.keys.append(nid)
            self.rects.append(QRectF(cx - w / 2, cy - h / 2, w, h))
            self.kinds.append(attrs.get("kind", "op"))
            self.reachable.append(attrs.get("reachable", True) is not False)
            self.norms.append(attrs.get("grad_norm"))
            self._lines.append(style.node_lines(nid, attrs))
        if not self._fixed_range:
            self._scale = LogColorScale(*auto_range(self.norms))
        self._compute_colors()
        self._build_nodes(graph)
        self._build_edges(graph, layout)
        self._rect = self._bounds().adjusted(-MARGIN, -MARGIN, MARGIN, MARGIN)
        self.setSceneRect(self._rect)
        self.colorScaleChanged.emit(self._scale)

    def _bounds(self) -> QRectF:
        if not self.rects:
            return QRectF(0, 0, 1, 1)
        xs0 = min(r.left() for r in self.rects)
        ys0 = min(r.top() for r in self.rects)
        xs1 = max(r.right() for r in self.rects)
        ys1 = max(r.bottom() for r in self.rects)
        return QRectF(xs0, ys0, xs1 - xs0, ys1 - ys0)

    def _build_nodes(self, graph: nx.DiGraph) -> None:
        add = self.addItem
        for i, (nid, rect) in enumerate(zip(self.ids, self.rects)):
            item = NodeItem(nid, i, rect)  # tooltips come from helpEvent, not 11k setToolTip calls
            add(item)
            self.items_by_id[nid] = item
        # batches of nodes that are close on screen: sort by (top, left) and cut in runs
        order = sorted(range(len(self.ids)), key=lambda i: (self.rects[i].top(), self.rects[i].left()))
        self.batch_of = [None] * len(self.ids)  # type: ignore[list-item]
        for start in range(0, len(order), NODES_PER_BATCH):
            chunk = order[start:start + NODES_PER_BATCH]
            rect = QRectF(self.rects[chunk[0]])
            for i in chunk[1:]:
                rect = rect.united(self.rects[i])
            batch = NodeBatch(self, chunk, rect.adjusted(-3, -3, 3, 3))  # room for thick outlines
            add(batch)
            self.node_batches.append(batch)
            for i in chunk:
                self.batch_of[i] = batch

    def _build_edges(self, graph: nx.DiGraph, layout: Layout) -> None:
        entries = []
        for (u, v), pts in layout.edges.items():
            if len(pts) >= 2 and u in self.index and v in self.index:
                attrs = graph.edges[u, v] if graph.has_edge(u, v) else {}
                entries.append((min(p[1] for p in pts), u, v, pts, attrs))
        entries.sort(key=lambda e: e[0])
        seen_labels: set[tuple] = set()
        for start in range(0, len(entries), EDGES_PER_BATCH):
            curves, lines, arrows = QPainterPath(), QPainterPath(), QPainterPath()
            labels: list[tuple[QPointF, str]] = []
            for _, u, v, pts, attrs in entries[start:start + EDGES_PER_BATCH]:
                path = edge_path(pts)
                self.edge_paths[(u, v)] = path
                curves.addPath(path)
                lines.moveTo(*pts[0])
                for p in pts[1:]:
                    lines.lineTo(*p)
                x1, y1 = pts[-1]
                arrows.addPolygon(_arrow(x1, y1))
                text = shape_text(attrs.get("shape"))
                if text and text != "scalar":
                    x0, y0 = pts[0]
                    key = (round(x0), round(y0), text)  # fan-out: one label per source, not per edge
                    if key not in seen_labels:
                        seen_labels.add(key)
                        # put the label on the side the curve does not head to
                        heads_right = pts[1][0] > x0 + 1
                        lx = x0 - 5 - style.text_width(text, style.SMALL_PX, 400) if heads_right else x0 + 5
                        labels.append((QPointF(lx, y0 + 13), text))
            rect = curves.boundingRect().united(arrows.boundingRect()).adjusted(-2, -2, 2, 2)
            for point, text in labels:
                rect = rect.united(QRectF(point.x() - 2, point.y() - 11, 8 + 6.5 * len(text), 14))
            batch = EdgeBatch(self, rect, curves, lines, arrows, labels)
            self.addItem(batch)
            self.edge_batches.append(batch)

    # -- colours -------------------------------------------------------------------------
    def _compute_colors(self) -> None:
        rgb = self._scale.colors_for(self.norms)
        cache: dict[tuple, tuple] = {}
        fills, texts, seconds, headers = [], [], [], []
        for r, g, b in rgb.tolist():
            key = (r, g, b)
            got = cache.get(key)
            if got is None:
                fill = QColor(r, g, b)
                text = QColor(*text_color_for(key))
                got = cache[key] = (fill, text, secondary_text(text), darker(fill, 0.16))
            fills.append(got[0])
            texts.append(got[1])
            seconds.append(got[2])
            headers.append(got[3])
        self.fill_colors, self.text_colors, self.secondary_colors, self.header_colors = fills, texts, seconds, headers
        for i, ok in enumerate(self.reachable):
            if not ok:  # unreachable parameters: always the "no gradient" look
                self.fill_colors[i] = QColor(*self._scale.color(None))

    def color_scale(self) -> LogColorScale:
        return self._scale

    def set_color_range(self, lo: float | None, hi: float | None = None, *, follow: bool = False) -> None:
        """Set the colour range. Fixed by default (e.g. across training steps); with
        ``follow=True`` it is only a starting point that live norms may refit; ``None``
        fits it to the current norms and follows them."""
        if lo is None or hi is None:
            self._fixed_range = False
            self._scale = LogColorScale(*auto_range(self.norms))
        else:
            self._fixed_range = not follow
            self._scale = LogColorScale(lo, hi)
        self._recolor()

    def set_norms(self, norms: Mapping[str, float | None]) -> None:
        """New gradient norms for some nodes (live colours); unknown ids are ignored."""
        index = self.index
        for nid, value in norms.items():
            i = index.get(nid)
            if i is not None:
                self.norms[i] = value
        if not self._fixed_range:
            lo, hi = auto_range(self.norms)
            # refit only when the data left the range or shrank a lot: colours should not flicker
            if lo < self._scale.lo or hi > self._scale.hi or hi < self._scale.hi / 100 or lo > self._scale.lo * 100:
                self._scale = LogColorScale(lo, hi)
        self._recolor()

    def _recolor(self) -> None:
        self._compute_colors()
        for batch in self.node_batches:
            batch.recolored()
        self.colorScaleChanged.emit(self._scale)

    # -- text ----------------------------------------------------------------------------
    def set_second_line(self, nid: str, text: str) -> None:
        """Replace a node's second line (e.g. the loss node's value while training); the box
        keeps its size, the text is elided to it."""
        i = self.index.get(nid)
        if i is None or self._lines[i][1] == text:
            return
        self._lines[i] = (self._lines[i][0], text)
        self._elided.pop(i, None)
        self.batch_of[i].update()

    def text_lines(self, i: int) -> tuple[str, str]:
        """The node's two lines elided to its box (computed on first paint, then cached)."""
        got = self._elided.get(i)
        if got is None:
            primary, secondary = self._lines[i]
            inner = self.rects[i].width() - 2 * (style.PAD_X - 4 if self.kinds[i] == "group" else style.PAD_X / 2)
            weight = 600 if self.kinds[i] == "group" else 500
            px = style.LABEL_PX - 1 if self.kinds[i] == "group" else style.LABEL_PX
            mode = Qt.ElideLeft if self.kinds[i] == "param" else Qt.ElideRight  # keep ".weight" visible
            got = (style.elide(primary, inner, px, weight, mode),
                   style.elide(secondary, inner, style.SMALL_PX, 400) if secondary else "")
            self._elided[i] = got
        return got

    def painter_for(self, i: int) -> NodePainter:
        return self._node_painter

    # -- window API ----------------------------------------------------------------------
    def node_item(self, nid: str) -> NodeItem | None:
        return self.items_by_id.get(nid)

    def node_at(self, pos: QPointF) -> str | None:
        for item in self.items(pos):
            if isinstance(item, NodeItem):
                return item.node_id
        return None

    def graph_rect(self) -> QRectF:
        return QRectF(self._rect)

    def dimmed_nodes(self) -> set[int] | None:
        """Indices drawn faded while a highlight is active (None: no highlight)."""
        return self._dim

    def highlight(self, nodes: Iterable[str], edges: Iterable[tuple[str, str]] = ()) -> None:
        """Emphasise ``nodes`` and ``edges``; everything else is faded."""
        self.hl_nodes = {self.index[n] for n in nodes if n in self.index}
        self._dim = set(range(len(self.ids))) - self.hl_nodes
        self._set_overlay("highlight", self._edges_path(edges), z=1.5)
        self._repaint_all()

    def clear_highlight(self) -> None:
        self.hl_nodes = set()
        self._dim = None
        self._set_overlay("highlight", None)
        self._repaint_all()

    def mark_edges(self, edges: Iterable[tuple[str, str]], style_name: str = "broken") -> None:
        """Draw ``edges`` in a style ('broken': red dashed); an empty list clears that style.

        An edge the layout does not have (e.g. a graph cut) is drawn straight between boxes.
        """
        self._set_overlay(f"mark:{style_name}", self._edges_path(edges, straight_missing=True), z=1.6)

    def mark_nodes(self, ids: Iterable[str], style_name: str = "nan-origin") -> None:
        """Put a badge on each node ('nan-origin': red '!'); an empty list clears that style."""
        for badge in self._badges.pop(style_name, []):
            self.removeItem(badge)
        badges = []
        color = MARK_COLORS.get(style_name, "#dc2626")
        for nid in ids:
            i = self.index.get(nid)
            if i is None:
                continue
            badge = Badge(color, "!" if style_name in ("nan-origin", "error", "warning") else "•")
            badge.setPos(self.rects[i].topRight())
            badge.setToolTip(style_name)
            self.addItem(badge)
            badges.append(badge)
        self._badges[style_name] = badges

    def clear_marks(self) -> None:
        for name in [k for k in self._overlays if k.startswith("mark:")]:
            self._set_overlay(name, None)
        for name in list(self._badges):
            self.mark_nodes([], name)

    # -- overlays ------------------------------------------------------------------------
    def _edges_path(self, edges: Iterable[tuple[str, str]], straight_missing: bool = False) -> QPainterPath | None:
        path = QPainterPath()
        for u, v in edges:
            got = self.edge_paths.get((u, v))
            if got is not None:
                path.addPath(got)
            elif straight_missing and u in self.index and v in self.index:
                a, b = self.rects[self.index[u]], self.rects[self.index[v]]
                path.addPath(edge_path([(a.center().x(), a.bottom()), (b.center().x(), b.top())]))
        return None if path.isEmpty() else path

    def _overlay_pen(self, name: str) -> QPen:
        if name and name.startswith("mark:"):
            which = name[5:]
            color = self.theme.color("broken") if which in ("broken", "cut") else QColor(
                MARK_COLORS.get(which, self.theme.broken))
            pen = QPen(color, 2.2, Qt.DashLine)
        else:
            pen = QPen(self.theme.color("accent"), 2.6)
        pen.setCapStyle(Qt.RoundCap)
        return pen

    def _set_overlay(self, name: str, path: QPainterPath | None, z: float = 1.5) -> None:
        old = self._overlays.pop(name, None)
        if old is not None:
            self.removeItem(old)
        if path is None:
            return
        item = QGraphicsPathItem(path)
        item.setData(0, name)
        item.setPen(self._overlay_pen(name))
        item.setZValue(z)
        item.setAcceptedMouseButtons(Qt.NoButton)
        self.addItem(item)
        self._overlays[name] = item

    def _repaint_all(self) -> None:
        for batch in self.node_batches:
            batch.update()
        for batch in self.edge_batches:
            batch.update()

    def selection_changed(self, i: int, selected: bool) -> None:
        """Called by ``NodeItem`` when its selection flips: repaint just that box."""
        if selected:
            self.selected.add(i)
        else:
            self.selected.discard(i)
        if i < len(self.batch_of) and self.batch_of[i] is not None:
            self.batch_of[i].update(self.rects[i].adjusted(-3, -3, 3, 3))

    # -- mouse ---------------------------------------------------------------------------
    def helpEvent(self, event) -> None:
        nid = self.node_at(event.scenePos())
        if nid is None or self.graph is None:
            QToolTip.hideText()
            return
        QToolTip.showText(event.screenPos(), _tooltip(nid, self.graph.nodes[self.keys[self.index[nid]]]))
        event.accept()

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mousePressEvent(event)
        if event.button() == Qt.LeftButton:
            nid = self.node_at(event.scenePos())
            if nid is None:
                self.backgroundClicked.emit()
            else:
                self.nodeClicked.emit(nid)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        super().mouseDoubleClickEvent(event)
        nid = self.node_at(event.scenePos())
        if nid is not None and event.button() == Qt.LeftButton:
            self.nodeDoubleClicked.emit(nid)


def edge_path(points: list[tuple[float, float]]) -> QPainterPath:
    """Smooth curve through the layout's points: each segment is a cubic leaving and
    entering vertically (data flows down), ending ``ARROW_LEN`` short for the arrowhead."""
    path = QPainterPath(QPointF(*points[0]))
    last = len(points) - 2
    for k, ((x0, y0), (x1, y1)) in enumerate(zip(points, points[1:])):
        if k == last:
            y1 -= ARROW_LEN if y1 > y0 else -ARROW_LEN
        dy = (y1 - y0) * 0.5
        path.cubicTo(x0, y0 + dy, x1, y1 - dy, x1, y1)
    return path


def _arrow(x: float, y: float):
    from PySide6.QtGui import QPolygonF
    return QPolygonF([QPointF(x, y), QPointF(x - ARROW_HALF_W, y - ARROW_LEN - 0.5),
                      QPointF(x + ARROW_HALF_W, y - ARROW_LEN - 0.5)])


def _tooltip(nid: str, attrs: dict) -> str:
    parts = [str(attrs.get("label") or nid)]
    if attrs.get("op"):
        parts.append(str(attrs["op"]))
    if attrs.get("module"):
        parts.append(f"{attrs['module']} ({attrs.get('module_type') or '?'})")
    shape = shape_text(attrs.get("shape"))
    if shape:
        parts.append(shape)
    if attrs.get("location"):
        parts.append(str(attrs["location"]))
    return "\n".join(parts)
