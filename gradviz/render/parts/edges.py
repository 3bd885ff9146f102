"""Edges of ``GraphScene``: smooth curves from the layout's polylines, arrowheads and
tensor-shape labels, built into ``EdgeBatch`` items of nearby edges.

A batch is repainted (all its curves stroked) whenever its bounding rect meets the exposed
area, so a batch must stay small on the graph: edges are grouped by place (``tiles.kd_chunks``),
an edge with bend points that is taller or wider than ``LONG`` is cut at its bend points into
pieces of about ``PIECE``, and a straight edge longer than ``LONG`` (a parameter used at each of
2,000 unrolled steps: edges 1.8 million pixels tall) is drawn by ``LongEdges``, which strokes only
the part of each curve inside the exposed area. Arrowheads and labels stay with the batch of
the place they are drawn at.
"""
from __future__ import annotations

from typing import NamedTuple

import networkx as nx
import numpy as np
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QPainterPath, QPolygonF

from gradviz.core.runtime.formatting import shape_text
from gradviz.core.layout.types import Layout
from gradviz.render.parts.items import EdgeBatch
from gradviz.render.parts.long_edges import LongEdges
from gradviz.render.parts.scene_reads import EdgeBuild
from gradviz.render.primitives import style
from gradviz.render.primitives.tiles import kd_chunks

EDGES_PER_BATCH = 160
ARROW_LEN, ARROW_HALF_W = 7.0, 3.6
LONG = 4096.0      # scene px: an edge extending further is not put whole in one batch
PIECE = 2048.0     # a long edge with bend points is cut into pieces about this tall or wide


def add_curve(path: QPainterPath, points: list[tuple[float, float]], shorten_end: bool = True) -> None:
    """Append the smooth curve through ``points``: each segment a cubic leaving and entering
    vertically (data flows down); with ``shorten_end`` it stops ``ARROW_LEN`` short of the last
    point, where the arrowhead is."""
    path.moveTo(*points[0])
    last = len(points) - 2
    for k, ((x0, y0), (x1, y1)) in enumerate(zip(points, points[1:])):
        if shorten_end and k == last:
            if y1 == y0:   # a parameter beside its op (core/layout/stub_sides): the edge runs sideways
                x1 -= ARROW_LEN if x1 > x0 else -ARROW_LEN
            else:
                y1 -= ARROW_LEN if y1 > y0 else -ARROW_LEN
        dy = (y1 - y0) * 0.5
        path.cubicTo(x0, y0 + dy, x1, y1 - dy, x1, y1)


def edge_path(points: list[tuple[float, float]]) -> QPainterPath:
    """The whole curve of one edge (see ``add_curve``)."""
    path = QPainterPath()
    add_curve(path, points)
    return path


def arrow(x: float, y: float, sideways: float = 0.0) -> QPolygonF:
    """The arrowhead with its tip at (x, y): pointing down, or with ``sideways`` +1 / -1 right / left."""
    if sideways:
        back = x - sideways * (ARROW_LEN + 0.5)
        return QPolygonF([QPointF(x, y), QPointF(back, y - ARROW_HALF_W), QPointF(back, y + ARROW_HALF_W)])
    return QPolygonF([QPointF(x, y), QPointF(x - ARROW_HALF_W, y - ARROW_LEN - 0.5),
                      QPointF(x + ARROW_HALF_W, y - ARROW_LEN - 0.5)])


def sideways(points: list[tuple[float, float]] | None) -> float:
    """+1 / -1 where the edge ends heading right / left (a side box's edge, level), else 0."""
    if not points or len(points) < 2 or points[-1][1] != points[-2][1] or points[-1][0] == points[-2][0]:
        return 0.0
    return 1.0 if points[-1][0] > points[-2][0] else -1.0


class Part(NamedTuple):
    """What one batch draws of an edge: a run of its curve, its arrowhead, its label."""
    box: tuple[float, float, float, float]          # left, top, right, bottom (scene)
    points: list | None = None                      # the run's points (None: arrow/label only)
    shorten_end: bool = False                       # the run ends at the edge's target
    whole: QPainterPath | None = None               # the edge's whole curve, when the run is all of it
    arrow_at: tuple[float, float] | None = None
    label: tuple[QPointF, str] | None = None


def build_edges(scene: EdgeBuild, graph: nx.DiGraph, layout: Layout) -> None:
    """Add the edge items to ``scene`` and fill ``scene.edge_paths`` (used by overlays)."""
    entries = []
    for (u, v), pts in layout.edges.items():
        if len(pts) >= 2 and u in scene.index and v in scene.index:
            attrs = graph.edges[u, v] if graph.has_edge(u, v) else {}
            entries.append((min(p[1] for p in pts), u, v, pts, attrs))
    entries.sort(key=lambda e: e[0])
    seen_labels: set[tuple] = set()
    solid: list[Part] = []
    dashed: list[Part] = []     # cut branches (core/trace/cut_branches.py): drawn whole, never split
    long_ends: list[tuple[float, float, float, float]] = []
    for _, u, v, pts, attrs in entries:
        path = edge_path(pts)
        scene.edge_paths[(u, v)] = path
        label = _shape_label(pts, shape_text(attrs.get("shape")), seen_labels)
        if attrs.get("dashed"):
            dashed.append(Part(_box(pts), pts, True, path, pts[-1], label))
        else:
            solid.extend(_parts(pts, path, label, long_ends))
    for parts, is_dashed in ((solid, False), (dashed, True)):
        _add_batches(scene, parts, is_dashed)
    if long_ends:
        item = LongEdges(scene, long_ends, ARROW_LEN)
        scene.addItem(item)
        scene.edge_batches.append(item)


def _box(pts: list) -> tuple[float, float, float, float]:
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return min(xs), min(ys), max(xs), max(ys)


def _parts(pts: list, path: QPainterPath, label, long_ends: list) -> list[Part]:
    """An edge as batch parts: whole when it is short; else its arrow and label alone and
    its curve cut at bend points (or, straight, left to ``LongEdges``: ``long_ends``)."""
    x0, y0, x1, y1 = box = _box(pts)
    if x1 - x0 <= LONG and y1 - y0 <= LONG:
        return [Part(box, pts, True, path, pts[-1], label)]
    (sx, sy), (tx, ty) = pts[0], pts[-1]
    ends = [Part((sx, sy, sx, sy), label=label), Part((tx, ty, tx, ty), arrow_at=pts[-1])]
    if len(pts) == 2:
        long_ends.append((sx, sy, tx, ty))
        return ends
    runs, start = [], 0
    for k in range(1, len(pts)):
        run_box = _box(pts[start:k + 1])
        if k > start + 1 and (run_box[2] - run_box[0] > PIECE or run_box[3] - run_box[1] > PIECE):
            runs.append((start, k - 1))
            start = k - 1
    runs.append((start, len(pts) - 1))
    return ends + [Part(_box(pts[a:b + 1]), pts[a:b + 1], b == len(pts) - 1) for a, b in runs]


def _add_batches(scene: EdgeBuild, parts: list[Part], dashed: bool) -> None:
    if not parts:
        return
    boxes = np.array([p.box for p in parts], dtype=np.float64)
    for chunk in kd_chunks(boxes, EDGES_PER_BATCH):
        curves, lines, arrows = QPainterPath(), QPainterPath(), QPainterPath()
        labels: list[tuple[QPointF, str]] = []
        rect = QRectF()
        for k in chunk.tolist():
            part = parts[k]
            x0, y0, x1, y1 = part.box
            rect = rect.united(QRectF(x0 - 2, y0 - 2, x1 - x0 + 4, y1 - y0 + 4))
            if part.points is not None:
                if part.whole is not None:
                    curves.addPath(part.whole)
                else:
                    add_curve(curves, part.points, part.shorten_end)
                lines.moveTo(*part.points[0])
                for p in part.points[1:]:
                    lines.lineTo(*p)
            if part.arrow_at is not None:
                ax, ay = part.arrow_at
                side = sideways(part.points)
                arrows.addPolygon(arrow(ax, ay, side))
                if side:
                    rect = rect.united(QRectF(ax - ARROW_LEN - 2.5, ay - ARROW_HALF_W - 2, 2 * ARROW_LEN + 5, 2 * ARROW_HALF_W + 4))
                else:
                    rect = rect.united(QRectF(ax - ARROW_HALF_W - 2, ay - ARROW_LEN - 2.5, 2 * ARROW_HALF_W + 4,
                                              ARROW_LEN + 4.5))
            if part.label is not None:
                point, text = part.label
                labels.append(part.label)
                rect = rect.united(QRectF(point.x() - 2, point.y() - 11, 8 + 6.5 * len(text), 14))
        batch = EdgeBatch(scene, rect, curves, lines, arrows, labels, dashed=dashed)
        scene.addItem(batch)
        scene.edge_batches.append(batch)


def _shape_label(pts: list, text: str, seen: set[tuple]) -> tuple[QPointF, str] | None:
    """Where an edge's tensor shape is written: one label per source (fan-out), on the
    side the curve does not head to; None for scalars and repeats."""
    if not text or text == "scalar" or sideways(pts):   # a level edge between side boxes: no room under it
        return None
    x0, y0 = pts[0]
    key = (round(x0), round(y0), text)
    if key in seen:
        return None
    seen.add(key)
    heads_right = pts[1][0] > x0 + 1
    lx = x0 - 5 - style.text_width(text, style.SMALL_PX, 400) if heads_right else x0 + 5
    return QPointF(lx, y0 + 13), text
