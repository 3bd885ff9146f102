"""Labelled, nested frames around expanded modules (like torchview's clusters).

A module drawn open (its nodes on their own, or its sub-modules as boxes) keeps a frame
around everything it holds, so module boundaries stay visible after expanding. Where no other
box lies inside the padded bounding box of its boxes (the clustered layout's promise) the frame
is that rectangle, its left side moved out so the label at its top-left lies left of the first edge
coming into its first row (``frame_room``; the layout keeps that room), the label moved to the
top-right where an edge still crosses it (``place_labels``). Otherwise it is one padded strip per
layer over each run of the module's boxes, joined across the gaps between layers where no other
box is in the way (``frame_shapes``): it follows the module's shape instead of a bounding box that
would cover its neighbours' boxes. Outer modules get wider padding than the modules inside them, so
frames nest (``frame_nesting``: which modules are framed and how deep).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from gradviz.core.trace.modules import prefixes
from gradviz.render.parts.frame_bands import BAND, BandPart, area_path, banded, lines_path
from gradviz.render.parts.frame_labels import covered, overlaps
from gradviz.render.parts.frame_labels import plate as label_plate
from gradviz.render.parts.items import visible_area
from gradviz.render.parts.scene_reads import PaintState
from gradviz.render.primitives import frame_room as room
from gradviz.render.primitives import frame_shapes as shapes
from gradviz.render.primitives import style
from gradviz.render.primitives.far_labels import MIN_SCREEN_W, paint_far_label
from gradviz.render.primitives.frame_nesting import (LABEL_PX, frame_label, framed_modules, nesting_heights,
                                                     padding, room_for)

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
    path: QPainterPath       # the area (rectangles, winding fill): contains / intersects / fill
    outline: QPainterPath    # the boundary, as line segments
    pieces: list[QRectF]     # each separate piece of the frame, top to bottom (label at its top-left)
    outermost: bool = False  # no framed module holds it (labelled when zoomed far out)
    rects: list[tuple[float, float, float, float]] = field(default_factory=list)     # ``path``'s rectangles
    segments: list[tuple[float, float, float, float]] = field(default_factory=list)  # ``outline``'s lines
    label_dx: list[float] = field(default_factory=list)   # per piece: the label moved right (``place_labels``)

    @property
    def label_at(self) -> list[QPointF]:
        """Baseline start of the label on each piece (scene coordinates)."""
        dx = self.label_dx or [0.0] * len(self.pieces)
        return [QPointF(b.left() + 5 + d, b.top() + 12) for b, d in zip(self.pieces, dx)]


def build_frames(graph: nx.DiGraph, index: dict, rects: list[QRectF], rows_in: room.Entries | None = None
                 ) -> list[Frame]:
    """Frames of the modules drawn open in ``graph`` (a view), outermost first. ``rows_in``: where
    edges come into each row from above (``frame_room.entries``): a rectangular frame is widened so
    its label lies left of them (``frame_room.widened``)."""
    members = framed_modules(graph)
    if not members:
        return []
    heights = nesting_heights(list(members))
    rows = shapes.Rows([(r.left(), r.top(), r.right(), r.bottom()) for r in rects])
    boxes: dict[str, tuple] = {}       # a rectangular frame's box, for the frame holding it
    children: dict[str, list[str]] = {}
    for module in members:
        parent = module.rpartition(".")[0]
        while parent and parent not in members:
            parent = parent.rpartition(".")[0]
        if parent:
            children.setdefault(parent, []).append(module)
    frames = []
    for module in sorted(members, key=lambda p: (-p.count("."), p)):     # innermost first
        inside = {index[n] for n in members[module] if n in index}
        if not inside or len(inside) > MAX_FRAMED:
            continue
        pad = padding(heights[module])
        box = shapes.rectangle(rows, inside, pad)
        if box is not None:   # the layout keeps modules apart (``core/layout/clusters``): one rectangle
            held = [(boxes[c], pad[0] - padding(heights[c])[0]) for c in children.get(module, ()) if c in boxes]
            label = frame_label(graph, module)
            need = room_for(style.text_width(label, LABEL_PX, 600))
            for c, step in held:
                box = room.widened(rows, inside, box, [c], step, 0.0, {})
            box = room.widened(rows, inside, box, [], 0.0, need, rows_in or {})
            boxes[module] = box
            rects, segments, frame_pieces = [box], shapes.box_outline(box), [box]
        else:
            stack = shapes.bands(rows, inside, pad)
            rects = [(x0, band.top, x1, band.bottom) for band in stack for x0, x1 in band.spans]
            segments, frame_pieces = shapes.outline(stack), shapes.pieces(stack)
        fill, line = area_path(rects), lines_path(segments)
        outermost = not any(p in members for p in prefixes(module)[:-1])
        frames.append(Frame(module, frame_label(graph, module), module.count(".") + 1,
                            heights[module], fill, line,
                            [QRectF(QPointF(x0, y0), QPointF(x1, y1)) for x0, y0, x1, y1 in frame_pieces],
                            outermost, rects, segments))
    frames.sort(key=lambda f: (f.depth - 1, f.module))     # outermost first, as they are painted
    return frames


def label_plates(frames: list[Frame], widths: list[float] | None = None) -> list[tuple[float, float, float, float]]:
    """The plate under each label of ``frames`` (every piece's), as painted (``frame_labels.plate``);
    ``widths``: the labels' text widths, when known."""
    out = []
    for k, f in enumerate(frames):
        width = style.text_width(f.label, LABEL_PX, 600) if widths is None else widths[k]
        dx = f.label_dx or [0.0] * len(f.pieces)      # as ``label_at``, without a QPointF each
        out += [label_plate(p.left() + d, p.top(), width) for p, d in zip(f.pieces, dx)]
    return out


def place_labels(frames: list[Frame], curves, boxes) -> None:
    """A label that an edge's drawn curve or a box still covers at its frame's top-left (an edge
    coming in steeply across stacked labels, a long one drawn straight) goes to the top-right of its
    piece instead, where that spot is clear and the piece wide enough; then labels of nested frames
    that share a top-left are put side by side (``_after_inner_labels``). ``curves``:
    ``frame_labels.curve_segments``, ``boxes``: (k, 4) left, top, right, bottom."""
    widths = [style.text_width(f.label, LABEL_PX, 600) for f in frames]
    plates = np.asarray(label_plates(frames, widths), dtype=float).reshape(-1, 4)
    hit = np.flatnonzero(covered(plates, curves, boxes))
    where = [(f, k) for f in frames for k in range(len(f.pieces))]
    if len(hit):
        _to_the_right(where, plates, hit, curves, boxes)
    _after_inner_labels(frames, widths, where, curves, boxes)


def _set_dx(frame: Frame, k: int, dx: float) -> None:
    if not frame.label_dx:
        frame.label_dx = [0.0] * len(frame.pieces)
    frame.label_dx[k] = dx


def _after_inner_labels(frames: list[Frame], widths: list[float], where: list, curves, boxes,
                        rounds: int = 3) -> None:
    """Nested frames past the padding's depth (``frame_nesting.MAX_LEVELS``) share their top-left: an
    outer frame's label moves right, past the label of the frame inside it that it lies under, where
    its piece is wide enough and the new spot is clear."""
    for _ in range(rounds):
        plates = np.asarray(label_plates(frames, widths), dtype=float).reshape(-1, 4)
        a, b = overlaps(plates)
        depth = np.asarray([f.depth for f, _ in where])
        outer = depth[a] < depth[b]
        a, b = a[outer], b[outer]      # a lies under b, the label of a frame inside a's
        if len(a) == 0:
            return
        past = np.full(len(plates), -np.inf)
        np.maximum.at(past, a, plates[b, 2] + 4.0)
        todo = np.unique(a)
        shift = past[todo] - plates[todo, 0]
        alt = plates[todo] + np.stack([shift, np.zeros_like(shift), shift, np.zeros_like(shift)], axis=1)
        right = np.asarray([where[i][0].pieces[where[i][1]].right() for i in todo.tolist()])
        fits = alt[:, 2] <= right - 2.0
        clear = fits & ~covered(alt, curves, boxes)
        if not clear.any():
            return
        for i, s, ok in zip(todo.tolist(), shift.tolist(), clear.tolist()):
            if ok:
                f, k = where[i]
                _set_dx(f, k, (f.label_dx[k] if f.label_dx else 0.0) + s)


def _to_the_right(where: list, plates, hit, curves, boxes) -> None:
    """Labels ``hit`` to the top-right of their pieces, where that is clear."""
    moved = []
    for i in hit.tolist():
        f, k = where[i]
        piece = f.pieces[k]
        dx = piece.width() - (plates[i, 2] - plates[i, 0]) - 4.0    # the plate 2 px in from the right side
        if dx > 0:
            moved.append((i, dx))
    if not moved:
        return
    alt = plates[[i for i, _ in moved]] + np.asarray([[dx, 0.0, dx, 0.0] for _, dx in moved])
    clear = ~covered(alt, curves, boxes)
    for (i, dx), ok in zip(moved, clear.tolist()):
        if ok:
            _set_dx(*where[i], dx)


class FrameItem(QGraphicsItem):
    """All frames of a scene in one item, painted outermost first under the edges.

    A frame of a module repeated along an unrolled graph can be as tall as the graph (2,000
    strips), so each frame is cut into horizontal bands ``BAND`` tall, and a frame paints only
    the bands (and labels) that meet the exposed area."""

    def __init__(self, scene: PaintState, frames: list[Frame]) -> None:
        super().__init__()
        self._scene = scene
        self.frames = frames
        rect = QRectF()
        for f in frames:
            rect = rect.united(f.path.boundingRect())
        self._rect = rect.adjusted(-2, -2, 2, 2)
        self._bands = banded(frames)
        self._widths = [style.text_width(f.label, LABEL_PX, 600) for f in frames]
        self._outer_pieces = sorted(((p.width(), k, p) for k, f in enumerate(frames) if f.outermost for p in f.pieces),
                                    key=lambda e: -e[0])
        self.setZValue(FRAME_Z)
        self.setAcceptedMouseButtons(Qt.NoButton)
        self.setFlag(QGraphicsItem.ItemUsesExtendedStyleOption)

    def boundingRect(self) -> QRectF:
        return self._rect

    def shape(self) -> QPainterPath:
        return QPainterPath()  # never hit: clicks go to the nodes and the background

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        sc = self._scene
        theme = sc.theme
        exposed = visible_area(painter, option, sc.force_detail)
        lod = QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())
        plate = QColor(theme.background)
        plate.setAlphaF(0.88)
        text = QColor(theme.muted_text)
        far = lod * LABEL_PX < 5 and not sc.force_detail
        if sc.far_now:       # the overview picture shows the frames: only their names, live
            self._far_labels(painter, exposed, lod, text, plate)
            return
        fill = QColor(theme.strong_outline)
        fill.setAlphaF(0.035)
        pen = QPen(QColor(theme.muted_text), 1.0)
        pen.setCosmetic(lod < 1.0)  # stays a visible hairline when zoomed out
        painter.setFont(style.font(LABEL_PX, 600))
        for part in self._parts_near(exposed, lod):
            if part.bounds.intersects(exposed):
                painter.setPen(Qt.NoPen)
                painter.setBrush(fill)
                painter.drawPath(part.fill)
                painter.setPen(pen)
                painter.setBrush(Qt.NoBrush)
                painter.drawPath(part.outline)
            if far:
                continue
            label, width = self.frames[part.frame].label, self._widths[part.frame]
            plates = [QRectF(QPointF(x0, y0), QPointF(x1, y1))
                      for x0, y0, x1, y1 in (label_plate(p.x() - 5, p.y() - 12, width) for p in part.labels)]
            shown = [k for k, r in enumerate(plates) if r.intersects(exposed)]
            for k in shown:  # on a plate, so edges passing under do not cross the text
                painter.fillRect(plates[k], plate)
            painter.setPen(text)
            for k in shown:
                painter.drawText(part.labels[k], label)
        if far and not (sc.overview is not None and sc.overview.painting):   # the picture is scaled: no names in it
            self._far_labels(painter, exposed, lod, text, plate)

    def _far_labels(self, painter: QPainter, exposed: QRectF, lod: float, text: QColor, plate: QColor) -> None:
        """Zoomed out, the outermost frames keep a readable name on each piece wide enough on screen."""
        shown = []
        for width, k, piece in self._outer_pieces:      # widest first
            if width * lod < MIN_SCREEN_W:
                break
            if QRectF(piece.left(), piece.top(), width * 3.5, 16 / lod).intersects(exposed):
                shown.append((k, piece))
        for k, piece in sorted(shown, key=lambda e: e[0]):
            paint_far_label(painter, piece, self.frames[k].module, lod, text, plate, overflow=1.0)

    def _parts_near(self, exposed: QRectF, lod: float) -> list["BandPart"]:
        """The band parts that may draw into ``exposed``: its bands and one either side (a label
        or a far label may reach over a band's edge), in paint order (outermost frame first)."""
        reach = max(20.0, 16 / max(lod, 1e-9))
        b0, b1 = int((exposed.top() - reach) // BAND), int((exposed.bottom() + reach) // BAND)
        keys = range(b0, b1 + 1) if b1 - b0 < len(self._bands) else sorted(self._bands)
        parts = [p for b in keys for p in self._bands.get(b, ())]
        parts.sort(key=lambda p: p.frame)
        return parts
