"""Straight edges too long for a batch: a parameter used at each of 2,000 unrolled steps has
2,000 edges, some 1.8 million scene pixels tall, and stroking them whole on every frame (Qt
strokes a path wholly, then clips) cost seconds at 1:1.

``LongEdges`` keeps their end points in numpy arrays and, per frame, strokes only the run of
each curve inside the exposed area: the curve of an edge without bend points is one cubic
whose x and y both move monotonically (``edges.add_curve``: vertical tangents), so the
parameters where it enters and leaves a rectangle have closed forms, and the run is the
same cubic cut there (its control points by blossoming). What is drawn inside the area is
the curve the whole edge would draw; an export (whose area holds everything) draws each
whole curve.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QLineF, QRectF, Qt
from PySide6.QtGui import QPainter, QPainterPath, QPen, QTransform
from PySide6.QtWidgets import QStyleOptionGraphicsItem

from gradviz.render.parts.items import SIMPLE_LOD, Batch, visible_area
from gradviz.render.parts.scene_reads import PaintState
from gradviz.render.primitives.edge_fans import fans, simple_view, to_device

LONG_Z = -0.5   # under the other edges (0), their arrowheads and labels; over module frames (-1)


def _inv_y(v: np.ndarray) -> np.ndarray:
    """t with y(t) = v for the curve's y progress y(t) = 1.5t - 1.5t^2 + t^3 (monotonic):
    with t = z + 1/2 it is z^3 + 0.75 z + 1/2 - v = 0, one real root (Cardano, sinh form)."""
    return 0.5 - np.sinh(np.arcsinh(2.0 - 4.0 * v) / 3.0)


def _inv_x(v: np.ndarray) -> np.ndarray:
    """t with x(t) = v for the x progress x(t) = 3t^2 - 2t^3 (smoothstep): its inverse."""
    return 0.5 - np.sin(np.arcsin(np.clip(1.0 - 2.0 * v, -1.0, 1.0)) / 3.0)


def _t_range(start: np.ndarray, span: np.ndarray, lo: float, hi: float, inverse) -> tuple[np.ndarray, np.ndarray]:
    """Parameters (ta, tb) where start + span * progress(t) lies in [lo, hi] (ta >= tb: never)."""
    flat = span == 0
    safe = np.where(flat, 1.0, span)
    ua, ub = (lo - start) / safe, (hi - start) / safe
    u0 = np.clip(np.minimum(ua, ub), 0.0, 1.0)
    u1 = np.clip(np.maximum(ua, ub), 0.0, 1.0)
    ta = np.where(u0 <= 0.0, 0.0, inverse(u0))
    tb = np.where(u1 >= 1.0, 1.0, inverse(u1))
    inside = (start >= lo) & (start <= hi)
    return np.where(flat, np.where(inside, 0.0, 1.0), ta), np.where(flat, np.where(inside, 1.0, 0.0), tb)


def _blossom(p: list[np.ndarray], u: np.ndarray, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    q = [(1 - u) * p[k] + u * p[k + 1] for k in range(3)]
    r = [(1 - v) * q[k] + v * q[k + 1] for k in range(2)]
    return (1 - w) * r[0] + w * r[1]


def clip_curves(ends: np.ndarray, area: QRectF) -> np.ndarray:
    """For curves from (x0, y0) to (x1, y1) (rows of ``ends``), the runs inside ``area`` as
    rows of cubic control points (x0, y0, c1x, c1y, c2x, c2y, x1, y1)."""
    x0, y0, x1, y1 = ends.T
    near = ((np.minimum(x0, x1) <= area.right()) & (np.maximum(x0, x1) >= area.left())
            & (np.minimum(y0, y1) <= area.bottom()) & (np.maximum(y0, y1) >= area.top()))
    x0, y0, x1, y1 = ends[near].T
    tya, tyb = _t_range(y0, y1 - y0, area.top(), area.bottom(), _inv_y)
    txa, txb = _t_range(x0, x1 - x0, area.left(), area.right(), _inv_x)
    ta, tb = np.maximum(tya, txa), np.minimum(tyb, txb)
    keep = ta < tb
    x0, y0, x1, y1, ta, tb = x0[keep], y0[keep], x1[keep], y1[keep], ta[keep], tb[keep]
    half = (y1 - y0) * 0.5
    xs, ys = [x0, x0, x1, x1], [y0, y0 + half, y1 - half, y1]
    cols = []
    for u, v, w in ((ta, ta, ta), (ta, ta, tb), (ta, tb, tb), (tb, tb, tb)):
        cols += [_blossom(xs, u, v, w), _blossom(ys, u, v, w)]
    return np.column_stack(cols) if cols[0].size else np.empty((0, 8))


def clip_lines(lines: np.ndarray, area: QRectF) -> tuple[np.ndarray, np.ndarray]:
    """Straight segments (rows x0, y0, x1, y1) cut to ``area`` (Liang-Barsky), the ones outside
    dropped; and the row index of each one kept."""
    x0, y0, x1, y1 = lines.T
    dx, dy = x1 - x0, y1 - y0
    t0, t1 = np.zeros(len(lines)), np.ones(len(lines))
    keep = np.ones(len(lines), dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        for p, q in ((-dx, x0 - area.left()), (dx, area.right() - x0), (-dy, y0 - area.top()), (dy, area.bottom() - y0)):
            keep &= ~((p == 0) & (q < 0))
            t = q / p
            t0 = np.where(p < 0, np.maximum(t0, t), t0)
            t1 = np.where(p > 0, np.minimum(t1, t), t1)
    keep &= t0 <= t1
    return np.column_stack([x0 + t0 * dx, y0 + t0 * dy, x0 + t1 * dx, y0 + t1 * dy])[keep], np.flatnonzero(keep)


class LongEdges(Batch):
    """The scene's long straight edges (solid), stroked only where exposed."""

    dashed = False

    def __init__(self, scene: PaintState, ends: list[tuple[float, float, float, float]], arrow_len: float) -> None:
        lines = np.asarray(ends, dtype=np.float64)        # source point, target point
        x0, y0, x1, y1 = lines.T
        lo_x, lo_y = float(min(x0.min(), x1.min())), float(min(y0.min(), y1.min()))
        rect = QRectF(lo_x, lo_y, float(max(x0.max(), x1.max())) - lo_x, float(max(y0.max(), y1.max())) - lo_y)
        super().__init__(scene, rect.adjusted(-2, -2, 2, 2))
        self.lines = lines
        self._qlines: list[QLineF | None] | None = None     # the lines as Qt objects, each made on first use
        # the curve stops short of the target, where the arrowhead is (edges.add_curve)
        self.curves = np.column_stack([x0, y0, x1, y1 - np.where(y1 > y0, arrow_len, -arrow_len)])
        self.setZValue(LONG_Z)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        sc = self._scene
        if sc.far_now:
            return
        lod = self.begin_edges(painter)
        margin = 3.0 + 3.0 / max(lod, 1e-6)     # the pen's width and antialiasing stay inside
        area = visible_area(painter, option, sc.force_detail).adjusted(-margin, -margin, margin, margin)
        view = None if sc.force_detail else painter.worldTransform()
        if lod < SIMPLE_LOD and not sc.force_detail:
            self._hairlines(painter, area, view)
            return
        pen = QPen(sc.pens["edge"])
        if view is not None and pen.widthF() * lod > 1.0:
            # on screen, at most one pixel wide: thousands of long edges may cross the view (a
            # parameter's fan-out over 2,000 steps), and Qt strokes a wider pen through its slow
            # general path (seconds with antialiasing); exports keep the edge pen
            pen.setWidthF(0.999 / lod)
        lines, curves = self.shapes(area, view)
        rest = self._bands(painter, lines, area, view, pen.widthF() * lod, pen.color())
        painter.setPen(pen)
        painter.drawLines([QLineF(*row) for row in lines[rest].tolist()])
        path = QPainterPath()
        for x0, y0, c1x, c1y, c2x, c2y, x1, y1 in curves.tolist():
            path.moveTo(x0, y0)
            path.cubicTo(c1x, c1y, c2x, c2y, x1, y1)
        painter.drawPath(path)

    def paint_lines(self, painter: QPainter, rows: np.ndarray) -> None:
        """Edges ``rows`` only, as hairlines over the whole item (the overview picture paints
        the long edges a part at a time: their strokes run the whole graph's height)."""
        self.begin_edges(painter)
        self._hairlines(painter, self.boundingRect(), painter.worldTransform(), rows)

    def _hairlines(self, painter: QPainter, area: QRectF, view: QTransform, among: np.ndarray | None = None) -> None:
        # Qt's cosmetic stroker clips whole lines cheaply, so the lines drawn are the edges' own
        # (made once); the cut ones only decide which and where bands go
        cut, rows = clip_lines(self.lines if among is None else self.lines[among], area)
        if among is not None:
            rows = among[rows]
        keep = distinct(cut, view)
        rows, cut = rows[keep], cut[keep]
        rest = self._bands(painter, cut, area, view, 1.0, self._scene.pens["edge_hairline"].color())
        painter.setPen(self._scene.pens["edge_hairline"])
        painter.drawLines(self._lines_at(rows[rest]))

    def _lines_at(self, rows: np.ndarray) -> list[QLineF]:
        """The edges ``rows`` as Qt lines, made once each (a first far frame, or one band of the
        overview picture, makes only the ones it draws: all 100k took 60 ms)."""
        if self._qlines is None:
            self._qlines = [None] * len(self.lines)
            self._made = np.zeros(len(self.lines), dtype=bool)
        qlines = self._qlines
        todo = rows[~self._made[rows]]
        for k, row in zip(todo.tolist(), self.lines[todo].tolist()):
            qlines[k] = QLineF(*row)
        self._made[todo] = True
        return [qlines[k] for k in rows.tolist()]

    @staticmethod
    def _bands(painter: QPainter, lines: np.ndarray, area: QRectF, view: QTransform | None, width: float,
               color) -> np.ndarray:
        """Fill the dense fans among ``lines`` (``width`` device pixels wide) as bands; the indices
        of the lines still to stroke."""
        if view is None:
            return np.arange(len(lines))
        bands, rest = fans(lines, area, view, width)
        if bands:
            painter.setPen(Qt.NoPen)
            painter.setBrush(color)
            for band in bands:
                painter.drawPolygon(band)
            painter.setBrush(Qt.NoBrush)
        return rest

    def shapes(self, area: QRectF, view: QTransform | None) -> tuple[np.ndarray, np.ndarray]:
        """What the curves draw inside ``area`` under ``view`` (None: an export, every run a
        curve): runs straight on screen as lines (x0, y0, x1, y1), one per pixel position, and
        the others as cubics (x0, y0, c1x, c1y, c2x, c2y, x1, y1)."""
        runs = clip_curves(self.curves, area)
        flat = flat_runs(runs, view)
        lines = runs[flat][:, [0, 1, 6, 7]]
        return lines[distinct(lines, view)], runs[~flat]


def flat_runs(runs: np.ndarray, view: QTransform | None) -> np.ndarray:
    """Which runs are straight on screen (control points within 0.2 px of the chord): drawn as
    lines. None (an export): none, every curve stays a curve."""
    if not simple_view(view) or not len(runs):
        return np.zeros(len(runs), dtype=bool)
    d = to_device(runs, view)
    x0, y0, x1, y1 = d[:, 0], d[:, 1], d[:, 6], d[:, 7]
    dx, dy = x1 - x0, y1 - y0
    length = np.hypot(dx, dy) + 1e-9
    dev = np.maximum(np.abs((d[:, 2] - x0) * dy - (d[:, 3] - y0) * dx),
                     np.abs((d[:, 4] - x0) * dy - (d[:, 5] - y0) * dx)) / length
    return dev * 0.75 < 0.2       # a cubic stays within 3/4 of its control points' distance


def distinct(lines: np.ndarray, view: QTransform | None) -> np.ndarray:
    """Indices of ``lines`` (x0, y0, x1, y1) less those landing on the same device pixels as one
    kept (both ends within half a pixel): a fan of thousands of edges draws the same ink with
    far fewer strokes."""
    if not simple_view(view) or len(lines) < 2:
        return np.arange(len(lines))
    q = np.round(to_device(lines, view) * 2.0)
    q = np.clip(q - q.min(axis=0), 0, 2 ** 15 - 1).astype(np.int64)   # half pixels, 15 bits a coordinate
    key = ((q[:, 0] << 45) | (q[:, 1] << 30) | (q[:, 2] << 15) | q[:, 3])
    _, keep = np.unique(key, return_index=True)
    return np.sort(keep)
