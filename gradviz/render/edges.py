"""Edges of ``GraphScene``: smooth curves from the layout's polylines, arrowheads and
tensor-shape labels, built into ``EdgeBatch`` items of ~160 edges each."""
from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QPainterPath, QPolygonF

from gradviz.core.formatting import shape_text
from gradviz.core.layout import Layout
from gradviz.render import style
from gradviz.render.items import EdgeBatch

if TYPE_CHECKING:
    from gradviz.render.scene import GraphScene

EDGES_PER_BATCH = 160
ARROW_LEN, ARROW_HALF_W = 7.0, 3.6


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


def arrow(x: float, y: float) -> QPolygonF:
    return QPolygonF([QPointF(x, y), QPointF(x - ARROW_HALF_W, y - ARROW_LEN - 0.5),
                      QPointF(x + ARROW_HALF_W, y - ARROW_LEN - 0.5)])


def build_edges(scene: "GraphScene", graph: nx.DiGraph, layout: Layout) -> None:
    """Add the edge batches to ``scene`` and fill ``scene.edge_paths`` (used by overlays)."""
    entries = []
    for (u, v), pts in layout.edges.items():
        if len(pts) >= 2 and u in scene.index and v in scene.index:
            attrs = graph.edges[u, v] if graph.has_edge(u, v) else {}
            entries.append((min(p[1] for p in pts), u, v, pts, attrs))
    entries.sort(key=lambda e: e[0])
    seen_labels: set[tuple] = set()
    solid = [e for e in entries if not e[4].get("dashed")]
    dashed = [e for e in entries if e[4].get("dashed")]     # cut branches (core/cut_branches.py)
    runs = [(solid[k:k + EDGES_PER_BATCH], False) for k in range(0, len(solid), EDGES_PER_BATCH)]
    runs += [(dashed[k:k + EDGES_PER_BATCH], True) for k in range(0, len(dashed), EDGES_PER_BATCH)]
    for run, is_dashed in runs:
        curves, lines, arrows = QPainterPath(), QPainterPath(), QPainterPath()
        labels: list[tuple[QPointF, str]] = []
        for _, u, v, pts, attrs in run:
            path = edge_path(pts)
            scene.edge_paths[(u, v)] = path
            curves.addPath(path)
            lines.moveTo(*pts[0])
            for p in pts[1:]:
                lines.lineTo(*p)
            arrows.addPolygon(arrow(*pts[-1]))
            label = _shape_label(pts, shape_text(attrs.get("shape")), seen_labels)
            if label is not None:
                labels.append(label)
        rect = curves.boundingRect().united(arrows.boundingRect()).adjusted(-2, -2, 2, 2)
        for point, text in labels:
            rect = rect.united(QRectF(point.x() - 2, point.y() - 11, 8 + 6.5 * len(text), 14))
        batch = EdgeBatch(scene, rect, curves, lines, arrows, labels, dashed=is_dashed)
        scene.addItem(batch)
        scene.edge_batches.append(batch)


def _shape_label(pts: list, text: str, seen: set[tuple]) -> tuple[QPointF, str] | None:
    """Where an edge's tensor shape is written: one label per source (fan-out), on the
    side the curve does not head to; None for scalars and repeats."""
    if not text or text == "scalar":
        return None
    x0, y0 = pts[0]
    key = (round(x0), round(y0), text)
    if key in seen:
        return None
    seen.add(key)
    heads_right = pts[1][0] > x0 + 1
    lx = x0 - 5 - style.text_width(text, style.SMALL_PX, 400) if heads_right else x0 + 5
    return QPointF(lx, y0 + 13), text
