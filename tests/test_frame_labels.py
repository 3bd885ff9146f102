"""The measure of frame labels under edges and boxes (``render.parts.frame_labels``, #29), on geometry
whose answer is known, and the level edges of a parameter beside its op."""
from __future__ import annotations

import numpy as np

from gradviz.render.parts.frame_labels import covered, curve_segments, plate


def test_a_plate_sits_at_the_frame_top_left():
    assert plate(100.0, 50.0, 40.0) == (102.0, 52.0, 148.0, 65.0)


def test_segments_and_boxes_that_cover_a_plate():
    plates = np.asarray([plate(0.0, 0.0, 40.0)] * 5)        # (2, 2) .. (48, 15)
    segments = np.asarray([
        [20.0, -50.0, 20.0, 50.0],      # straight down through it
        [60.0, -50.0, 60.0, 50.0],      # beside it
        [-10.0, 30.0, 70.0, -20.0],     # across it, slanted
        [-10.0, 40.0, 70.0, 20.0],      # below it
    ])
    for k, expected in enumerate([True, False, True, False]):
        assert covered(plates[:1], segments[k:k + 1], np.zeros((0, 4))).tolist() == [expected], k
    boxes = np.asarray([[40.0, 10.0, 90.0, 40.0], [49.0, 0.0, 90.0, 40.0]])   # overlapping; beside
    assert covered(plates[:2], np.zeros((0, 4)), boxes[:1]).tolist() == [True, True]
    assert covered(plates[:1], np.zeros((0, 4)), boxes[1:]).tolist() == [False]


def test_far_apart_in_y_never_meet():
    """The bucketed join pairs only what shares a y bucket: a plate far below a segment is clear."""
    plates = np.asarray([plate(0.0, 10_000.0, 40.0)])
    assert covered(plates, np.asarray([[20.0, -50.0, 20.0, 50.0]]), np.zeros((0, 4))).tolist() == [False]
    assert covered(plates, np.asarray([[20.0, 0.0, 20.0, 20_000.0]]), np.zeros((0, 4))).tolist() == [True]


def test_curves_leave_and_enter_vertically():
    """The flattened drawn curve of a slanted edge starts and ends at the polyline's points and is
    vertical at both ends (edges.add_curve's cubics), so it crosses a plate above its end where the
    target's x is, not along the straight line."""
    seg = curve_segments([[(0.0, 0.0), (200.0, 100.0)]])
    assert tuple(seg[0, :2]) == (0.0, 0.0) and tuple(seg[-1, 2:]) == (200.0, 100.0)
    first, last = seg[0], seg[-1]
    assert abs(first[2] - first[0]) < abs(first[3] - first[1])
    assert abs(last[2] - last[0]) < abs(last[3] - last[1])


def test_a_level_edge_has_a_sideways_arrowhead():
    from gradviz.render.parts.edges import ARROW_LEN, arrow, sideways

    assert sideways([(0.0, 5.0), (40.0, 5.0)]) == 1.0
    assert sideways([(40.0, 5.0), (0.0, 5.0)]) == -1.0
    assert sideways([(0.0, 0.0), (0.0, 40.0)]) == 0.0
    head = arrow(40.0, 5.0, 1.0)
    xs = sorted(head.at(k).x() for k in range(3))
    assert xs[-1] == 40.0 and xs[0] == 40.0 - ARROW_LEN - 0.5
    down = arrow(0.0, 40.0)
    assert max(down.at(k).y() for k in range(3)) == 40.0
