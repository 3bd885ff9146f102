"""A finding's broken edge (a pair autograd never linked) is drawn in the real window."""
from __future__ import annotations

import gradviz
from test_app_support import SAMPLES, open_and_wait


def test_detach_finding_draws_a_broken_edge(qtbot, window):
    script = SAMPLES / "bugs" / "detach.py"
    finding = next(f for f in gradviz.check(script) if f.code == "unreachable")
    assert finding.edges, "the detach finding should name the cut edge"
    open_and_wait(qtbot, window, script)
    u, v = finding.edges[0]
    assert not window.document.graph.has_edge(u, v)  # autograd never recorded it
    window.mark_edges(finding.edges, "broken")
    overlay = window.scene.marks_layer.paths.get("mark:broken")
    assert overlay is not None and not overlay.path().isEmpty()


def test_colour_range_api_for_extensions(qtbot, window):
    """Extensions fix the colour range and read node colours through the window."""
    open_and_wait(qtbot, window, SAMPLES / "mlp_digits.py")
    lo, hi = window.color_range()
    assert 0 < lo < hi
    before = window.node_color("loss")
    assert before is not None
    window.set_color_range(hi * 10, hi * 100)    # everything now sits below the range: darkest colour
    assert window.node_color("loss") != before
    window.set_node_norms({"loss": hi * 1000})   # live norms keep the fixed range
    assert window.color_range() == (hi * 10, hi * 100)
    window.set_color_range(None)
    assert window.color_range() != (hi * 10, hi * 100)
    assert window.node_color("no-such-node") is None


def test_live_norms_refit_the_colour_range_unless_fixed(qtbot, window):
    open_and_wait(qtbot, window, SAMPLES / "mlp_digits.py")
    lo, hi = window.color_range()
    small = {n: lo / 1000 for n in window.document.graph.nodes}
    window.set_node_norms(small)                 # training made every gradient much smaller
    assert window.color_range()[0] <= lo / 1000  # the colour bar follows the data
    window.set_color_range(lo, hi)               # the user fixes the range
    window.set_node_norms({n: lo / 1e6 for n in window.document.graph.nodes})
    assert window.color_range() == (lo, hi)
