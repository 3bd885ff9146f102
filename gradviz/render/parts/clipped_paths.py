"""A path item for overlays of many edges (a selection's highlighted neighbourhood, diagnosis
marks) that strokes only what is near the view.

Selecting a parameter of an RNN unrolled over 2,000 steps highlights its 2,000 edges, some as
tall as the graph; a ``QGraphicsPathItem`` strokes all of them, whole, in every frame (1.3 s at
1:1 with antialiasing). ``ClippedPathItem`` keeps each edge's curve apart: it strokes the ones
whose bounds meet the view, and of a long single-cubic edge (``edges.add_curve``: vertical
tangents) only the run inside the view, once per half-pixel position (``long_edges``). Exports
(``GraphScene.force_detail``) stroke the whole path as before.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPainter, QPainterPath
from PySide6.QtWidgets import QGraphicsPathItem, QStyleOptionGraphicsItem

from gradviz.render.parts.edges import LONG
from gradviz.render.parts.items import lod_of, visible_area
from gradviz.render.parts.long_edges import clip_curves, distinct, flat_runs

MANY = 24    # long runs in view beyond which they are drawn a pixel wide
_MOVE, _CURVE = QPainterPath.ElementType.MoveToElement, QPainterPath.ElementType.CurveToElement


def _subpaths(path: QPainterPath) -> list[list]:
    """The path's elements as subpaths: lists of (type, x, y)."""
    out: list[list] = []
    for k in range(path.elementCount()):
        e = path.elementAt(k)
        if e.type == _MOVE or not out:
            out.append([])
        out[-1].append((e.type, e.x, e.y))
    return out


class ClippedPathItem(QGraphicsPathItem):
    """``QGraphicsPathItem`` whose painting on screen is cut to the view (see the module)."""

    def __init__(self, path: QPainterPath) -> None:
        super().__init__(path)
        self._parts: tuple[list, np.ndarray] | None = None   # (short subpaths with bounds, long cubics' ends)

    def _split(self) -> tuple[list, np.ndarray]:
        if self._parts is None:
            short, ends = [], []
            for sub in _subpaths(self.path()):
                (_, x0, y0), (_, x1, y1) = sub[0], sub[-1]
                if len(sub) == 4 and sub[1][0] == _CURVE and (abs(x1 - x0) > LONG or abs(y1 - y0) > LONG) \
                        and sub[1][1] == x0 and sub[2][1] == x1:          # one vertical-tangent cubic
                    ends.append((x0, y0, x1, y1))
                    continue
                part = QPainterPath()
                part.moveTo(x0, y0)
                k = 1
                while k < len(sub):
                    if sub[k][0] == _CURVE:
                        part.cubicTo(sub[k][1], sub[k][2], sub[k + 1][1], sub[k + 1][2], sub[k + 2][1], sub[k + 2][2])
                        k += 3
                    else:
                        part.lineTo(sub[k][1], sub[k][2])
                        k += 1
                short.append((part.boundingRect(), part))
            self._parts = (short, np.asarray(ends, dtype=np.float64).reshape(-1, 4))
        return self._parts

    def setPath(self, path: QPainterPath) -> None:   # noqa: N802 (Qt's name)
        self._parts = None
        super().setPath(path)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        scene = self.scene()
        if scene is not None and getattr(scene, "force_detail", False):
            super().paint(painter, option, widget)
            return
        lod = lod_of(painter)
        margin = 3.0 + (self.pen().widthF() + 3.0) / max(lod, 1e-6)
        area = visible_area(painter, option).adjusted(-margin, -margin, margin, margin)
        short, ends = self._split()
        path = QPainterPath()
        for bounds, part in short:
            if bounds.intersects(area):
                path.addPath(part)
        painter.setPen(self.pen())
        painter.setBrush(Qt.NoBrush)
        painter.drawPath(path)
        runs = clip_curves(ends, area) if len(ends) else np.empty((0, 8))
        view = painter.worldTransform()
        flat = flat_runs(runs, view)
        lines = np.flatnonzero(flat)
        lines = lines[distinct(runs[lines][:, [0, 1, 6, 7]], view)]     # once per pixel position
        runs = runs[np.sort(np.concatenate([lines, np.flatnonzero(~flat)]))]
        pen = self.pen()
        if len(runs) > MANY and pen.widthF() * lod > 1.0:
            # Qt strokes a wide antialiased pen at ~0.5 ms per 900-pixel line: with hundreds of
            # long edges in view (a parameter's fan-out) they are drawn one pixel wide instead
            pen.setWidthF(0.999 / lod)
        long_path = QPainterPath()
        for x0, y0, c1x, c1y, c2x, c2y, x1, y1 in runs.tolist():
            long_path.moveTo(x0, y0)
            long_path.cubicTo(c1x, c1y, c2x, c2y, x1, y1)
        painter.setPen(pen)
        painter.drawPath(long_path)

    def visible_runs(self, area: QRectF) -> int:
        """How many curves a view of ``area`` strokes (tests)."""
        short, ends = self._split()
        return sum(1 for bounds, _ in short if bounds.intersects(area)) + len(clip_curves(ends, area))
