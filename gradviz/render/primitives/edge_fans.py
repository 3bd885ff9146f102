"""Dense fans of long edges as filled bands.

A parameter used at each of 2,000 unrolled steps sends 2,000 edges down the drawing; at 1:1 a
view deep in the graph is crossed by thousands of them, most less than a pixel apart: a solid
grey band of 900-pixel strokes (tens of milliseconds of rasterising, most pixels written many
times). Lines that cross the whole view top to bottom and, at each of 17 rows across it, lie
within one line width of their neighbours in x order cover everything between their left- and
rightmost line without a gap: that band is filled as one polygon (its sides follow the
outermost lines at those rows) instead of being stroked line by line; lines outside a band are
stroked. Only the view's own drawing does this; an export strokes every edge.
"""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QPolygonF, QTransform

MIN_FAN = 4          # fewer lines than this stay lines
SAMPLES = 17         # rows at which a band's sides follow its outermost lines
MAX_FANS = 8         # bands per view at most


def simple_view(view: QTransform | None) -> bool:
    """A view that only scales and moves (every view of the window; not an export)."""
    return view is not None and view.type().value <= QTransform.TxScale.value


def to_device(xy: np.ndarray, view: QTransform) -> np.ndarray:
    """Scene points (columns x, y, x, y, ...) in device pixels under a scale-and-translate view."""
    out = np.empty_like(xy)
    out[:, 0::2] = xy[:, 0::2] * view.m11() + view.dx()
    out[:, 1::2] = xy[:, 1::2] * view.m22() + view.dy()
    return out


def _dense(xs: np.ndarray, width: float) -> np.ndarray:
    """Columns of ``xs`` (x of each line at each sampled row) forming one band: at every row the
    kept lines, in x order, are no further apart than ``width``. Each row keeps its largest such
    run of the lines kept so far, over a few passes (keeping fewer may open a gap elsewhere)."""
    members = np.arange(xs.shape[1])
    for _ in range(3):
        changed = False
        for row in xs:
            order = np.argsort(row[members])
            cuts = np.flatnonzero(np.diff(row[members][order]) > width) + 1
            if len(cuts):
                bounds = np.concatenate([[0], cuts, [len(order)]])
                k = int(np.argmax(np.diff(bounds)))
                members, changed = members[order[bounds[k]:bounds[k + 1]]], True
                if len(members) < MIN_FAN:
                    return members[:0]
        if not changed:
            return members
    return members[:0]       # still changing: no band rather than one with a gap


def fans(lines: np.ndarray, area: QRectF, view: QTransform, width: float) -> tuple[list[QPolygonF], np.ndarray]:
    """Bands (scene polygons) covering the dense fans among ``lines`` (x0, y0, x1, y1, already cut
    to ``area``) as strokes ``width`` device pixels wide would; and the indices of the lines left
    to stroke."""
    if not simple_view(view) or len(lines) < MIN_FAN or view.m22() <= 0:
        return [], np.arange(len(lines))
    d = to_device(lines, view)
    top_y, bottom_y = area.top() * view.m22() + view.dy(), area.bottom() * view.m22() + view.dy()
    down = d[:, 1] <= d[:, 3]
    x_top, x_bottom = np.where(down, d[:, 0], d[:, 2]), np.where(down, d[:, 2], d[:, 0])
    through = np.flatnonzero((np.abs(np.minimum(d[:, 1], d[:, 3]) - top_y) < 0.01)
                             & (np.abs(np.maximum(d[:, 1], d[:, 3]) - bottom_y) < 0.01))
    rows = np.linspace(0.0, 1.0, SAMPLES)[:, None]
    ys = (top_y + rows[:, 0] * (bottom_y - top_y) - view.dy()) / view.m22()
    bands, banded = [], np.zeros(len(lines), dtype=bool)
    left_over = through
    for _ in range(MAX_FANS):
        if len(left_over) < MIN_FAN:
            break
        xs = (1.0 - rows) * x_top[left_over] + rows * x_bottom[left_over]     # (SAMPLES, lines) device x
        kept = _dense(xs, width)
        if len(kept) < MIN_FAN:
            break
        left = (xs[:, kept].min(axis=1) - width / 2 - view.dx()) / view.m11()
        right = (xs[:, kept].max(axis=1) + width / 2 - view.dx()) / view.m11()
        outline = list(zip(left.tolist(), ys.tolist())) + list(zip(right.tolist(), ys.tolist()))[::-1]
        bands.append(QPolygonF([QPointF(x, y) for x, y in outline]))
        banded[left_over[kept]] = True
        left_over = np.delete(left_over, kept)
    return bands, np.flatnonzero(~banded)
