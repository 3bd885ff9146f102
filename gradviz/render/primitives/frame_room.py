"""A rectangular frame widened to hold its label clear of edges (#29), in plain numbers (no Qt).

A frame's label sits at its top-left, above the module's first row. The clustered layout keeps every
edge that enters that row from above at least the label's width right of the module's left border
(``core/layout/clusters._label_room``); here the frame's left side moves out to that width, so the
label lies between the frame's side and the first edge coming in. A parent frame holds its children
as they were widened. A widening that would reach a box of another module (a layout made without
the label room) is not made.
"""
from __future__ import annotations

from gradviz.render.primitives.frame_shapes import MAX_ROW_HALF, Box, Rows

Entries = dict[float, list[float]]   # row (its boxes' centre y) -> x of each edge coming into it from above


def entries(polylines: list[tuple[list[tuple[float, float]], float | None]]) -> Entries:
    """Where edges come into rows from above: each polyline's points reached going down, the last one
    at the row of its target box (given as that box's centre y; None: unknown)."""
    out: Entries = {}
    for pts, target_row in polylines:
        for k in range(1, len(pts)):
            (_, ya), (xb, yb) = pts[k - 1], pts[k]
            if yb <= ya:
                continue
            row = target_row if k == len(pts) - 1 else round(yb, 1)
            if row is not None:
                out.setdefault(row, []).append(xb)
    return out


def _clear(rows: Rows, inside: set[int], box: Box) -> bool:
    x0, y0, x1, y1 = box
    for i in rows.between(y0 - MAX_ROW_HALF, y1 + MAX_ROW_HALF):
        b = rows.boxes[i]
        if i not in inside and b[0] < x1 and b[2] > x0 and b[1] < y1 and b[3] > y0:
            return False
    return True


def widened(rows: Rows, inside: set[int], box: Box, children: list[Box], step: float,
            room: float, rows_in: Entries) -> Box:
    """``box`` (the padded bounding box of the boxes ``inside``) holding ``children``'s frames
    ``step`` in, then with its left side far enough out that ``room`` fits before the first edge
    entering its first row."""
    x0, y0, x1, y1 = box
    for c in children:     # already widened clear of other boxes, inside this module's border
        x0, x1 = min(x0, c[0] - step), max(x1, c[2] + step)
    held = (x0, y0, x1, y1)
    if room <= 0 or not inside:
        return held
    first = min(rows.y_of[i] for i in inside)
    xs = [x for x in rows_in.get(first, ()) if x0 <= x <= x1]
    if not xs or min(xs) - room >= x0:
        return held
    out = (min(xs) - room, y0, x1, y1)
    return out if _clear(rows, inside, out) else held
