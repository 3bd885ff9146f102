"""Where a frame's label is drawn, and which labels lie under an edge or a box (issue #29's measure).

A label is painted on a plate at the top-left of each piece of its frame (``plate``). It is *covered*
when the drawn curve of an edge (``edges.add_curve``: cubics leaving and entering vertically,
flattened here) passes through the plate, or a box overlaps it. Read by ``frames`` (painting), the
tests and ``benchmarks/bench_clusters.py``. No Qt: plain numbers, whole-array numpy.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

Array = np.ndarray
PLATE_H = 13.0
BUCKET = 64.0       # y buckets for the plate-to-segment join
CURVE_STEPS = 8     # pieces per drawn cubic


def plate(left: float, top: float, text_width: float) -> tuple[float, float, float, float]:
    """The label plate (left, top, right, bottom) of a frame piece whose top-left is (left, top)."""
    return left + 2.0, top + 2.0, left + 2.0 + text_width + 6.0, top + 2.0 + PLATE_H


def curve_segments(polylines: list[list[tuple[float, float]]]) -> Array:
    """(k, 4) segments x0, y0, x1, y1 of the edges' drawn curves: each polyline segment's cubic with
    vertical tangents (control points half its height away), flattened."""
    lens = np.fromiter((len(p) for p in polylines), dtype=np.int64, count=len(polylines))
    if int(lens.sum()) == 0:
        return np.zeros((0, 4))
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(polylines)), dtype=float,
                       count=2 * int(lens.sum())).reshape(-1, 2)
    last = np.cumsum(lens) - 1                     # each polyline's last point starts no segment
    starts = np.ones(len(flat), dtype=bool)
    starts[last[lens > 0]] = False
    k = np.flatnonzero(starts)
    a, b = flat[k], flat[k + 1]
    dy = (b[:, 1] - a[:, 1]) * 0.5
    t = np.linspace(0.0, 1.0, CURVE_STEPS + 1)[None, :]
    mt = 1.0 - t
    c0, c1 = mt ** 3, 3 * mt ** 2 * t
    c2, c3 = 3 * mt * t ** 2, t ** 3
    x = c0 * a[:, :1] + c1 * a[:, :1] + c2 * b[:, :1] + c3 * b[:, :1]
    y = c0 * a[:, 1:] + c1 * (a[:, 1:] + dy[:, None]) + c2 * (b[:, 1:] - dy[:, None]) + c3 * b[:, 1:]
    return np.stack([x[:, :-1], y[:, :-1], x[:, 1:], y[:, 1:]], axis=-1).reshape(-1, 4)


def _pairs(plates: Array, lo: Array, hi: Array) -> tuple[Array, Array]:
    """(plate, item) index pairs whose y ranges share a bucket (items spanning ``lo``..``hi`` in y),
    some more than once."""
    if len(plates) == 0 or len(lo) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    b0, b1 = np.floor(lo / BUCKET).astype(np.int64), np.floor(hi / BUCKET).astype(np.int64)
    span = b1 - b0 + 1
    item = np.repeat(np.arange(len(lo)), span)
    bucket = np.repeat(b0, span) + (np.arange(len(item)) - np.repeat(np.cumsum(span) - span, span))
    o = np.argsort(bucket, kind="stable")
    bucket, item = bucket[o], item[o]
    pp, ii = [], []
    top = np.floor(plates[:, 1] / BUCKET).astype(np.int64)
    bottom = np.floor(plates[:, 3] / BUCKET).astype(np.int64)
    # a plate (13 px) meets one bucket or two; a pair may come twice (an item in both), which only
    # repeats a test
    two = np.flatnonzero(bottom != top)
    for which, pb in ((np.arange(len(plates)), top), (two, bottom[two])):
        first = np.searchsorted(bucket, pb, side="left")
        last = np.searchsorted(bucket, pb, side="right")
        n = last - first
        p = np.repeat(which, n)
        k = np.repeat(first, n) + (np.arange(len(p)) - np.repeat(np.cumsum(n) - n, n))
        pp.append(p)
        ii.append(item[k])
    return np.concatenate(pp), np.concatenate(ii)


def covered(plates: Array, segments: Array, boxes: Array, slack: float = 0.5) -> Array:
    """Per plate (rows left, top, right, bottom), whether a segment crosses it or a box overlaps it."""
    out = np.zeros(len(plates), dtype=bool)
    if len(plates) == 0:
        return out
    r = plates + np.array([slack, slack, -slack, -slack])
    if len(boxes):
        p, i = _pairs(r, boxes[:, 1], boxes[:, 3])
        hit = (boxes[i, 0] < r[p, 2]) & (boxes[i, 2] > r[p, 0]) & (boxes[i, 1] < r[p, 3]) & (boxes[i, 3] > r[p, 1])
        out[p[hit]] = True
    if len(segments):
        s = segments
        p, i = _pairs(r, np.minimum(s[:, 1], s[:, 3]), np.maximum(s[:, 1], s[:, 3]))
        x0, y0, x1, y1 = s[i, 0], s[i, 1], s[i, 2], s[i, 3]
        # Liang-Barsky: clip the segment's parameter range to the rectangle's four slabs
        dx, dy = x1 - x0, y1 - y0
        t0, t1 = np.zeros(len(p)), np.ones(len(p))
        ok = np.ones(len(p), dtype=bool)
        for d, q in ((-dx, x0 - r[p, 0]), (dx, r[p, 2] - x0), (-dy, y0 - r[p, 1]), (dy, r[p, 3] - y0)):
            par = d == 0
            ok &= ~(par & (q < 0))
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(par, 0.0, q / np.where(par, 1.0, d))
            t0 = np.where(~par & (d < 0), np.maximum(t0, t), t0)
            t1 = np.where(~par & (d > 0), np.minimum(t1, t), t1)
        hit = ok & (t0 <= t1)
        out[p[hit]] = True
    return out


def overlaps(plates: Array, slack: float = 0.5) -> tuple[Array, Array]:
    """Pairs (a, b), a != b, of plates that overlap (each pair both ways)."""
    if len(plates) < 2:
        none = np.zeros(0, dtype=np.int64)
        return none, none
    r = plates + np.array([slack, slack, -slack, -slack])
    a, b = _pairs(r, r[:, 1], r[:, 3])
    hit = (a != b) & (r[b, 0] < r[a, 2]) & (r[b, 2] > r[a, 0]) & (r[b, 1] < r[a, 3]) & (r[b, 3] > r[a, 1])
    return a[hit], b[hit]
