"""The Compare view's data: both sides grouped alike, box norms at the step, B/A ratios per box."""
from __future__ import annotations

import math

import pytest

from gradviz.core.record.compare import compare
from gradviz.core.record.compare_view import (LIMITS, RATIO_CMAP, compare_views, group_norm, ratio_value, ratio_view,
                                             scale_range)
from gradviz.core.record.reader import open_run
from test_compare import record


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("views")
    return {"before": record(d / "before.gvrun", detach=True), "after": record(d / "after.gvrun")}


def test_box_norms_are_the_steps_parameter_norms(runs):
    c = compare(f"{runs['after']}@0", runs["after"])
    views = compare_views(c, max_boxes=4)             # small budget: the encoder and head become boxes
    box = views.view_b.nodes["group:encoder"]
    with open_run(runs["after"]) as r:
        row = r.step_row(c.b.node_step)
        norms = dict(zip(r.param_names, row["grad_norms"]))
    expected = math.sqrt(sum(norms[p] ** 2 for p in norms if p.startswith("encoder.")))
    assert box["grad_norm"] == pytest.approx(expected, rel=1e-5)
    assert views.expanded == set() or "encoder" not in views.expanded
    ratio = views.ratio.nodes["group:encoder"]
    a = views.view_a.nodes["group:encoder"]["grad_norm"]
    assert ratio["norm_ratio"] == pytest.approx(expected / a, rel=1e-5)
    assert ratio["grad_norm"] == pytest.approx(min(max(expected / a, 1 / views.limit), views.limit))


def test_ratio_view_across_a_fix(runs):
    views = compare_views(compare(runs["before"], runs["after"]))
    g = views.ratio
    for name in ("encoder.0.weight", "encoder.2.bias"):
        attrs = g.nodes[f"param:{name}"]
        assert attrs["norm_a"] is None and attrs["norm_b"] > 0
        assert attrs["grad_norm"] == scale_range(views.limit)[1]   # appeared: its own colour, past the red end
    head = g.nodes["param:head.weight"]
    assert head["grad_norm"] == pytest.approx(head["norm_b"] / head["norm_a"])
    assert views.limit in LIMITS and g.graph["loss"] is None


def test_ratio_values_and_map():
    assert ratio_value(1.0, 2.0, 10) == 2.0
    assert ratio_value(1.0, 1e6, 10) == 10 and ratio_value(1.0, 1e-9, 10) == pytest.approx(0.1)
    assert ratio_value(None, 1.0, 100) == scale_range(100)[1] and ratio_value(1.0, None, 100) == scale_range(100)[0]
    assert ratio_value(None, None, 10) is None and math.isnan(ratio_value(1.0, math.inf, 10))
    assert RATIO_CMAP.shape == (256, 3) and tuple(RATIO_CMAP[128]) >= (250, 250, 250)
    assert RATIO_CMAP[0][2] > RATIO_CMAP[0][0] and RATIO_CMAP[-1][0] > RATIO_CMAP[-1][2]   # blue ... red


def test_group_norm():
    import networkx as nx

    g = nx.DiGraph()
    g.add_node("p1", kind="param", grad_norm=3.0)
    g.add_node("p2", kind="param", grad_norm=4.0)
    g.add_node("o", kind="op", grad_norm=100.0)
    g.add_node("q", kind="op", grad_norm=None)
    assert group_norm(g, ["p1", "p2", "o"]) == 5.0
    assert group_norm(g, ["o", "q"]) == 100.0 and group_norm(g, ["q"]) is None


def test_ratio_text_never_rounds_a_change_away():
    from gradviz.app.compare.ratio_legend import ratio_text

    assert ratio_text(1.54) == "×1.54" and ratio_text(0.9993) == "×0.999" and ratio_text(0.08) == "÷12.5"
    assert ratio_text(0.5) == "×0.5" and ratio_text(100.0) == "×100" and ratio_text(0.01) == "÷100"


def _line_view(norms):
    import networkx as nx

    g = nx.DiGraph()
    for k, v in enumerate(norms):
        g.add_node(f"op:{k}", kind="op", grad_norm=v)
    return g


@pytest.mark.parametrize("ratios, limit", [
    ([1.5, 0.8, 1.2, 1.0], 2.0),          # two steps of a run: x1.5 must not be drawn white on a x10 scale
    ([3.0, 0.25, 1.1, 1.0], 5.0),
    ([40.0, 0.5, 1.0, 1.0], 100.0),
    ([1e6, 1.0, 1.0, 1.0], 1e4),          # capped
])
def test_ratio_scale_is_the_first_that_holds_the_ratios(ratios, limit):
    a = _line_view([1.0] * len(ratios))
    b = _line_view(ratios)
    _, got = ratio_view(a, b, "id")
    assert got == limit


def test_scale_ticks():
    from gradviz.app.compare.ratio_legend import scale_ticks

    assert scale_ticks(2.0) == [0.5, 1.0, 2.0]
    assert scale_ticks(1e3) == [1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1e3]


def test_a_vanished_gradient_has_its_own_colour_not_the_scales_end():
    """Issue #27 item 6: a 5x drop in Compare's ratio view had exactly the "vanished" colour."""
    from gradviz.core.output.colors import LogColorScale
    from gradviz.core.record.compare_view import APPEARED_RGB, SCALE_CMAP, VANISHED_RGB

    scale = LogColorScale(*scale_range(5.0), cmap=SCALE_CMAP)
    drop, gone = scale.colors_for([ratio_value(5.0, 1.0, 5.0), ratio_value(5.0, None, 5.0)]).tolist()
    rise, new = scale.colors_for([ratio_value(1.0, 5.0, 5.0), ratio_value(None, 1.0, 5.0)]).tolist()
    assert tuple(gone) == tuple(VANISHED_RGB) and tuple(new) == tuple(APPEARED_RGB)
    assert tuple(drop) != tuple(gone) and tuple(rise) != tuple(new)
    assert tuple(drop) == tuple(RATIO_CMAP[0]) and tuple(rise) == tuple(RATIO_CMAP[-1])   # the finite scale's ends
