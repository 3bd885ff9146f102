"""Collapsing the module tree into boxes and expanding it again."""
from __future__ import annotations

from pathlib import Path

import gradviz
from gradviz.core.layout.grouping import auto_depth, collapse, expanded_to_depth

SCRIPTS = Path(__file__).parent / "scripts"


def test_collapse_to_depth_one_keeps_edges_between_groups():
    g = gradviz.trace(SCRIPTS / "nested.py")
    # folded, the encoder (two identical blocks and nothing else) is drawn as its blocks' fold
    assert "fold:encoder.0..encoder.1" in collapse(g, depth=1) and "group:encoder" not in collapse(g, depth=1)
    c = collapse(g, depth=1, fold=False)
    groups = {n for n, a in c.nodes(data=True) if a["kind"] == "group"}
    assert groups == {"group:encoder", "group:head"}
    assert c.has_edge("group:encoder", "group:head")
    assert c.has_edge("input:0", "group:encoder")
    members = set(c.nodes["group:encoder"]["members"])
    assert "param:encoder.0.proj.weight" in members
    # every original node is either visible or inside exactly one group
    visible = {n for n in c if not n.startswith("group:")}
    inside = [m for n in groups for m in c.nodes[n]["members"]]
    assert len(inside) == len(set(inside))
    assert visible | set(inside) == set(g.nodes)
    assert c.nodes["group:encoder"]["grad_norm"] == g.graph["modules"]["encoder"]["grad_norm"]


def test_expanding_one_group_reveals_its_children():
    g = gradviz.trace(SCRIPTS / "nested.py")
    c = collapse(g, expanded={"encoder"}, fold=False)
    assert "group:encoder.0" in c and "group:encoder.1" in c and "group:encoder" not in c
    assert c.has_edge("group:encoder.0", "group:encoder.1")
    full = collapse(g, depth=10)
    assert set(full.nodes) == set(g.nodes)
    assert full.number_of_edges() == g.number_of_edges()


def test_auto_depth_respects_the_box_budget():
    g = gradviz.trace(SCRIPTS / "nested.py")
    assert auto_depth(g, max_boxes=1000) >= 3  # small graph: fully expanded
    shallow = auto_depth(g, max_boxes=6)
    assert collapse(g, expanded=expanded_to_depth(g, shallow)).number_of_nodes() <= 6
