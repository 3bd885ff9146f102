"""The shape of a module frame, in plain numbers (no Qt): horizontal bands of x-intervals.

A frame is a stack of bands from top to bottom: a *row band* per layer holding the
module's boxes (one interval per run of member boxes that no other box interrupts, padded),
then a *gap band* to the next such row (intervals joining the two rows where no other
box is in the way). Its outline is then cheap to draw without polygon boolean operations:
vertical sides of every interval, and at each band boundary the x-ranges covered on one
side but not the other. Pieces are the groups of intervals that touch.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

Interval = tuple[float, float]
MAX_SIDE_GAP = 60.0       # rows side by side further apart than this are not joined
MAX_ROW_HALF = 200.0      # half the tallest box: rows whose centre lies this far outside a box may reach into it
Box = tuple[float, float, float, float]          # left, top, right, bottom


@dataclass
class Band:
    top: float
    bottom: float
    spans: list[Interval]


class Rows:
    """Boxes grouped by row (same centre y), each row sorted left to right."""

    def __init__(self, boxes: list[Box]) -> None:
        self.boxes = boxes
        by_y: dict[float, list[int]] = {}
        for i, (_, t, _, b) in enumerate(boxes):
            by_y.setdefault(round((t + b) / 2, 1), []).append(i)
        self.ys = sorted(by_y)
        self.row = {y: sorted(ids, key=lambda i: boxes[i][0]) for y, ids in by_y.items()}
        self.y_of = {i: y for y, ids in by_y.items() for i in ids}

    def between(self, y0: float, y1: float) -> list[int]:
        """Boxes of the rows whose centre lies in [y0, y1]."""
        lo, hi = bisect.bisect_left(self.ys, y0), bisect.bisect_right(self.ys, y1)
        return [i for y in self.ys[lo:hi] for i in self.row[y]]


def rectangle(rows: Rows, inside: set[int], pad: tuple[float, float, float]) -> Box | None:
    """The padded bounding box of the boxes ``inside``, or None when a box outside them meets it."""
    pad_x, pad_top, pad_bottom = pad
    boxes = rows.boxes
    x0 = min(boxes[i][0] for i in inside) - pad_x
    y0 = min(boxes[i][1] for i in inside) - pad_top
    x1 = max(boxes[i][2] for i in inside) + pad_x
    y1 = max(boxes[i][3] for i in inside) + pad_bottom
    for i in rows.between(y0 - MAX_ROW_HALF, y1 + MAX_ROW_HALF):
        if i in inside:
            continue
        b = boxes[i]
        if b[0] < x1 and b[2] > x0 and b[1] < y1 and b[3] > y0:
            return None
    return (x0, y0, x1, y1)


def box_outline(box: Box) -> list[tuple[float, float, float, float]]:
    x0, y0, x1, y1 = box
    return [(x0, y0, x1, y0), (x1, y0, x1, y1), (x1, y1, x0, y1), (x0, y1, x0, y0)]


def bands(rows: Rows, inside: set[int], pad: tuple[float, float, float]) -> list[Band]:
    """Row and gap bands of the frame around the boxes ``inside`` (indices into ``rows.boxes``)."""
    pad_x, pad_top, pad_bottom = pad
    boxes = rows.boxes
    out: list[Band] = []
    last_y = None
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
        members = [i for run in runs for i in run]
        band = Band(min(boxes[i][1] for i in members) - pad_top, max(boxes[i][3] for i in members) + pad_bottom,
                    [(boxes[run[0]][0] - pad_x, boxes[run[-1]][2] + pad_x) for run in runs])
        if out:
            out.append(_gap(rows, inside, out[-1], band, last_y, y, pad_x))
        out.append(band)
        last_y = y
    return out


def _gap(rows: Rows, inside: set[int], upper: Band, lower: Band, y0: float, y1: float, pad_x: float) -> Band:
    """The band between two row bands: a join for each pair of intervals that crosses no other box."""
    others = [rows.boxes[i] for i in rows.between(y0, y1) if i not in inside]
    top, bottom = upper.bottom, max(lower.top, upper.bottom)
    spans: list[Interval] = []
    for a in upper.spans:
        for b in lower.spans:
            left, right = max(a[0], b[0]), min(a[1], b[1])
            if right - left < 2 * pad_x:  # side by side: join across the gap between their near edges
                if left - right > MAX_SIDE_GAP:
                    continue              # far apart: two pieces (each labelled) read better than a corridor
                left, right = min(left, right) - 2 * pad_x, max(left, right) + 2 * pad_x
            if not any(o[0] < right and o[2] > left and o[1] < bottom and o[3] > top for o in others):
                spans.append((left, right))
    return Band(top, bottom, merge(spans))


def merge(spans: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of the (sorted, disjoint) intervals ``a`` not covered by ``b``."""
    out = []
    for x0, x1 in a:
        cur = x0
        for y0, y1 in b:
            if y1 <= cur or y0 >= x1:
                continue
            if y0 > cur:
                out.append((cur, y0))
            cur = max(cur, y1)
        if cur < x1:
            out.append((cur, x1))
    return out


def outline(stack: list[Band]) -> list[tuple[float, float, float, float]]:
    """Line segments (x0, y0, x1, y1) of the frame's boundary."""
    segs = []
    for band in stack:
        for x0, x1 in band.spans:
            segs += [(x0, band.top, x0, band.bottom), (x1, band.top, x1, band.bottom)]
    edges = [([], stack[0].spans, stack[0].top)] if stack else []
    edges += [(a.spans, b.spans, b.top) for a, b in zip(stack, stack[1:])]
    if stack:
        edges.append((stack[-1].spans, [], stack[-1].bottom))
    for above, below, y in edges:
        for x0, x1 in _minus(above, below) + _minus(below, above):
            segs.append((x0, y, x1, y))
    return segs


def pieces(stack: list[Band]) -> list[Box]:
    """Bounding box of each group of touching intervals, top to bottom (labels go top-left)."""
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for bi, band in enumerate(stack):
        for si in range(len(band.spans)):
            parent[(bi, si)] = (bi, si)
    for bi in range(len(stack) - 1):
        for si, a in enumerate(stack[bi].spans):
            for sj, b in enumerate(stack[bi + 1].spans):
                if a[0] < b[1] and b[0] < a[1]:
                    parent[find((bi + 1, sj))] = find((bi, si))
    boxes: dict[tuple[int, int], list[float]] = {}
    for (bi, si) in parent:
        root = find((bi, si))
        x0, x1 = stack[bi].spans[si]
        got = boxes.get(root)
        if got is None:   # the first (topmost, leftmost) interval of a piece sets where its label goes
            boxes[root] = [x0, stack[bi].top, x1, stack[bi].bottom]
        else:
            got[1], got[2], got[3] = min(got[1], stack[bi].top), max(got[2], x1), max(got[3], stack[bi].bottom)
    return sorted((tuple(b) for b in boxes.values()), key=lambda b: (b[1], b[0]))
