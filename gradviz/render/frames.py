"""Labelled, nested frames around expanded modules (like torchview's clusters).

A module drawn open (its nodes on their own, or its sub-modules as boxes) keeps a frame
around everything it holds, so module boundaries stay visible after expanding. The layout
keeps a module's nodes contiguous within each layer, so a frame is the union of one
padded strip per layer it occupies, joined across the gaps between layers: it follows the
module's shape instead of a bounding box that would cover its neighbours' nodes. Outer
modules get wider padding than the modules inside them, so frames nest.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from gradviz.core.modules import prefixes
from gradviz.render import style
from gradviz.render.far_labels import paint_far_label

if TYPE_CHECKING:
    from gradviz.render.scene import GraphScene

PAD_X = 6.0                   # side padding of an innermost frame (+4 per level of frames inside)
PAD_TOP = 17.0                # room for the label above the module's first row
PAD_BOTTOM = 6.0
LABEL_STEP = 14.0             # each level of nesting stacks its label above the inner one
MAX_LEVELS = 2                # padding stops growing past this nesting height
LABEL_PX = 10
FRAME_Z = -1.0
# a module drawn open with more boxes than this gets no frame: its outline (a union of one strip
# per row, simplified) grows super-linearly (an unrolled RNN cell over 2,000 steps: 20,000 rows,
# minutes); at that size the frame would span the whole drawing anyway
MAX_FRAMED = 5000


@dataclass
class Frame:
    module: str
    label: str
    depth: int               # dots in the module path + 1
    height: int              # nesting levels of framed modules inside (0: innermost)
    path: QPainterPath
    pieces: list[QRectF]     # bounding box of each separate piece of the frame, top to bottom
    outermost: bool = False  # no framed module holds it (labelled when zoomed far out)

    @property
    def label_at(self) -> list[QPointF]:
        """Baseline start of the label on each piece (scene coordinates)."""
        return [QPointF(b.left() + 5, b.top() + 12) for b in self.pieces]


def framed_modules(graph: nx.DiGraph) -> dict[str, list[str]]:
    """Module path -> view node ids drawn inside it, for every module drawn open.

    A collapsed box ``group:M`` counts as inside M's parents (not M: M is the box itself).
    Inputs and the loss belong to no module. The whole model ('') gets no frame.
    """
    members: dict[str, list[str]] = {}
    for nid, attrs in graph.nodes(data=True):
        kind = attrs.get("kind")
        if kind in ("loss", "input"):
            continue
        module = attrs.get("module") or ""
        paths = prefixes(module)[:-1] if kind == "group" else prefixes(module)
        for path in paths:
            if path:
                members.setdefault(path, []).append(nid)
    return members


def _heights(modules: list[str]) -> dict[str, int]:
    """Nesting height: 0 for a frame with no framed module inside, else 1 + the tallest inside."""
    height = {m: 0 for m in modules}
    for m in sorted(modules, key=lambda p: -p.count(".")):
        parent = m.rpartition(".")[0]
        while parent and parent not in height:
            parent = parent.rpartition(".")[0]
        if parent:
            height[parent] = max(height[parent], height[m] + 1)
    return height


class _Rows:
    """The boxes of a scene by row (a layer: same centre y), each row sorted left to right."""

    def __init__(self, rects: list[QRectF]) -> None:
        self.rects = rects
        by_y: dict[float, list[int]] = {}
        for i, r in enumerate(rects):
            by_y.setdefault(round(r.center().y(), 1), []).append(i)
        self.ys = sorted(by_y)
        self.row = {y: sorted(ids, key=lambda i: rects[i].left()) for y, ids in by_y.items()}
        self.y_of = {i: y for y, ids in by_y.items() for i in ids}

    def between(self, y0: float, y1: float) -> list[int]:
        """Boxes in the rows from ``y0`` to ``y1`` (inclusive)."""
        lo, hi = bisect.bisect_left(self.ys, y0), bisect.bisect_right(self.ys, y1)
        return [i for y in self.ys[lo:hi] for i in self.row[y]]


def _strips(rows: _Rows, inside: set[int], pad: tuple[float, float, float]) -> list[tuple[float, list[QRectF]]]:
    """Per row holding members (top to bottom), the padded strips over runs of member boxes
    that no other box interrupts: a frame never covers a box of another module."""
    pad_x, pad_top, pad_bottom = pad
    rects = rows.rects
    out = []
    for y in sorted({rows.y_of[i] for i in inside}):
        runs: list[list[int]] = []
        fresh = True
        for i in rows.row[y]:
            if i not in inside:
                fresh = True
                continue
            if fresh:
                runs.append([])
                fresh = False
            runs[-1].append(i)
        out.append((y, [QRectF(QPointF(rects[run[0]].left() - pad_x, min(rects[i].top() for i in run) - pad_top),
                               QPointF(rects[run[-1]].right() + pad_x,
                                       max(rects[i].bottom() for i in run) + pad_bottom)) for run in runs]))
    return out


def _outline(rows: _Rows, inside: set[int], pad: tuple[float, float, float]) -> QPainterPath:
    """Union of the strips, joined to the strips of the next row where the join crosses
    no other box (a module split by another one's boxes is drawn in pieces)."""
    layers = _strips(rows, inside, pad)
    path = QPainterPath()
    path.setFillRule(Qt.WindingFill)
    for (y0, upper_row), (y1, lower_row) in zip(layers, layers[1:]):
        others = [rows.rects[i] for i in rows.between(y0, y1) if i not in inside]
        for upper in upper_row:
            for lower in lower_row:
                left, right = max(upper.left(), lower.left()), min(upper.right(), lower.right())
                if right - left < 2 * pad[0]:  # side by side: join across the gap between their near edges
                    left, right = min(left, right) - 2 * pad[0], max(left, right) + 2 * pad[0]
                bridge = QRectF(QPointF(left, upper.bottom() - 1), QPointF(right, lower.top() + 1))
                if not any(bridge.intersects(r) for r in others):
                    path.addRect(bridge)
    for _, row in layers:
        for strip in row:
            path.addRect(strip)
    return path.simplified()


def padding(height: int) -> tuple[float, float, float]:
    """(side, top, bottom) padding of a frame with ``height`` levels of frames inside:
    each level adds room for its own label above the inner ones."""
    h = min(height, MAX_LEVELS)
    return PAD_X + 4.0 * h, PAD_TOP + LABEL_STEP * h, PAD_BOTTOM + 4.0 * h


def nesting_height(graph: nx.DiGraph) -> int:
    """Levels of frames inside the outermost frame (capped): the layout leaves room for their labels."""
    heights = _heights(list(framed_modules(graph)))
    return min(max(heights.values(), default=-1) + 1, MAX_LEVELS + 1)


def build_frames(graph: nx.DiGraph, index: dict, rects: list[QRectF]) -> list[Frame]:
    """Frames of the modules drawn open in ``graph`` (a view), outermost first."""
    members = framed_modules(graph)
    if not members:
        return []
    modules_info = graph.graph.get("modules", {})
    heights = _heights(list(members))
    rows = _Rows(rects)
    frames = []
    for module in sorted(members, key=lambda p: (p.count("."), p)):
        inside = {index[n] for n in members[module] if n in index}
        if not inside or len(inside) > MAX_FRAMED:
            continue
        pad = padding(heights[module])
        path = _outline(rows, inside, pad)
        mtype = (modules_info.get(module) or {}).get("type") or ""
        outermost = not any(p in members for p in prefixes(module)[:-1])
        frames.append(Frame(module, f"{module} · {mtype}" if mtype else module, module.count(".") + 1,
                            heights[module], path, _pieces(path), outermost))
    return frames


def _pieces(path: QPainterPath) -> list[QRectF]:
    """Bounding boxes of the separate pieces of a frame (holes left out), top to bottom."""
    boxes = [poly.boundingRect() for poly in path.toSubpathPolygons()]
    pieces = [b for b in boxes if not any(o is not b and o.contains(b) for o in boxes)]
    return sorted(pieces, key=lambda b: (b.top(), b.left()))


class FrameItem(QGraphicsItem):
    """All frames of a scene in one item, painted outermost first under the edges."""

    def __init__(self, scene: "GraphScene", frames: list[Frame]) -> None:
        super().__init__()
        self._scene = scene
        self.frames = frames
        rect = QRectF()
        for f in frames:
            rect = rect.united(f.path.boundingRect())
        self._rect = rect.adjusted(-2, -2, 2, 2)
        self.setZValue(FRAME_Z)
        self.setAcceptedMouseButtons(Qt.NoButton)
        self.setFlag(QGraphicsItem.ItemUsesExtendedStyleOption)

    def boundingRect(self) -> QRectF:
        return self._rect

    def shape(self) -> QPainterPath:
        return QPainterPath()  # never hit: clicks go to the nodes and the background

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        theme = self._scene.theme
        exposed = option.exposedRect
        lod = QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
        ink = QColor(theme.strong_outline)
        fill = QColor(ink)
        fill.setAlphaF(0.035)
        pen = QPen(QColor(theme.muted_text), 1.0)
        plate = QColor(theme.background)
        plate.setAlphaF(0.88)
        pen.setCosmetic(lod < 1.0)  # stays a visible hairline when zoomed out
        painter.setFont(style.font(LABEL_PX, 600))
        for f in self.frames:
            if not f.path.boundingRect().intersects(exposed):
                continue
            painter.setPen(pen)
            painter.setBrush(fill)
            painter.drawPath(f.path)
            if lod * LABEL_PX < 5 and not self._scene.force_detail:
                if f.outermost:  # zoomed out: the outermost frames keep a readable name
                    for piece in f.pieces:
                        paint_far_label(painter, piece, f.module, lod, QColor(theme.muted_text), plate, overflow=1.0)
                continue
            width = style.text_width(f.label, LABEL_PX, 600)
            for point in f.label_at:  # on a plate, so edges passing under do not cross the text
                painter.fillRect(QRectF(point.x() - 3, point.y() - 10, width + 6, 13), plate)
            painter.setPen(QColor(theme.muted_text))
            for point in f.label_at:
                painter.drawText(point, f.label)
