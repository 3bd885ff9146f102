"""Spatial grouping for the painted batches of ``GraphScene``, and point look-ups without items.

A batch item is repainted whenever its bounding rect meets the exposed area, so a batch must
hold things that are close together: ``kd_chunks`` cuts the boxes by a k-d split (the longer
side of the chunk, at the median) until each chunk holds at most ``size``. The chunks of a
100k-node graph then cover small, compact areas at any aspect ratio (a 1.8-million-pixel tall
unrolled RNN, a 170,000-pixel wide folded one), where sorting by (top, left) made chunks as
wide as the graph.

``BoxIndex`` answers "which box is under this point" with numpy instead of a ``QGraphicsItem``
per box in the scene's index: with 100k node items in the index every frame asked Qt for all of
them (a third of a frame at Fit).
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
from PySide6.QtCore import QRectF


def boxes_array(rects: Sequence[QRectF]) -> np.ndarray:
    """(n, 4) float array of left, top, right, bottom."""
    out = np.empty((len(rects), 4), dtype=np.float64)
    for k, r in enumerate(rects):
        out[k] = (r.left(), r.top(), r.right(), r.bottom())
    return out


def kd_chunks(boxes: np.ndarray, size: int) -> Iterator[np.ndarray]:
    """Indices of ``boxes`` in chunks of at most ``size`` close boxes, top-left chunks first.

    Each split halves a chunk across its longer extent (of box centres) at the median, so
    chunks hold between ``size / 2`` and ``size`` boxes and are roughly square in scene area."""
    if len(boxes) == 0:
        return
    cx = (boxes[:, 0] + boxes[:, 2]) * 0.5
    cy = (boxes[:, 1] + boxes[:, 3]) * 0.5
    leaves = []
    stack = [np.arange(len(boxes))]
    while stack:
        idx = stack.pop()
        if len(idx) <= size:
            leaves.append(idx)
            continue
        xs, ys = cx[idx], cy[idx]
        key = xs if np.ptp(xs) > np.ptp(ys) else ys
        half = len(idx) // 2
        order = np.argpartition(key, half)
        stack.append(idx[order[half:]])
        stack.append(idx[order[:half]])
    leaves.sort(key=lambda c: (boxes[c, 1].min(), boxes[c, 0].min()))
    for leaf in leaves:
        yield leaf[np.lexsort((boxes[leaf, 0], boxes[leaf, 1]))]   # within a chunk: rows, then left to right


def union_rect(boxes: np.ndarray) -> QRectF:
    """The rectangle covering all rows of a (n, 4) box array."""
    x0, y0 = boxes[:, 0].min(), boxes[:, 1].min()
    return QRectF(float(x0), float(y0), float(boxes[:, 2].max() - x0), float(boxes[:, 3].max() - y0))


class BoxIndex:
    """The boxes of a scene's nodes, for hit-testing points (clicks, tooltips)."""

    def __init__(self, rects: Sequence[QRectF], grow: float = 0.5) -> None:
        # grow: a QGraphicsRectItem's shape includes half its (default 1 px) pen, so clicks on the
        # outline hit the box; the look-up keeps that
        self._boxes = boxes_array(rects)
        if len(self._boxes):
            self._boxes += (-grow, -grow, grow, grow)

    def at(self, x: float, y: float) -> int | None:
        """Index of the topmost box containing (x, y): the last added, as Qt stacks equal z."""
        b = self._boxes
        if not len(b):
            return None
        hits = np.flatnonzero((b[:, 0] <= x) & (x <= b[:, 2]) & (b[:, 1] <= y) & (y <= b[:, 3]))
        return int(hits[-1]) if len(hits) else None
