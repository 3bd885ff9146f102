"""Collapse a traced graph's module tree into boxes, and expand them again.

A node is drawn inside the outermost module on its path that is *not* expanded;
when every module on its path is expanded it is drawn on its own. Edges between
boxes are kept (one edge per pair, ``count`` says how many it stands for).
"""
from __future__ import annotations

import math
from typing import Iterable

import networkx as nx

from gradviz.core.modules import depth_of, prefixes


def expanded_to_depth(graph: nx.DiGraph, depth: int) -> set[str]:
    """Module paths to expand so that modules at ``depth`` are the visible boxes."""
    return {p for p in graph.graph.get("modules", {}) if p and depth_of(p) < depth}


def group_of(module: str, expanded: set[str]) -> str | None:
    """The box a node of ``module`` falls into, or None when it is shown on its own."""
    for prefix in prefixes(module):
        if prefix not in expanded:
            return prefix
    return None


def collapse(graph: nx.DiGraph, depth: int | None = None, expanded: Iterable[str] | None = None) -> nx.DiGraph:
    """The graph with unexpanded modules merged into ``group:<path>`` nodes.

    Give ``depth`` (modules at that depth of the module tree become the boxes:
    1 = one box per top-level module; deeper than the tree = nothing collapsed) or
    an explicit set of ``expanded`` module paths. Ids of ungrouped nodes are unchanged.
    """
    if expanded is None:
        expanded = expanded_to_depth(graph, 1 if depth is None else max(depth, 1))
    expanded = set(expanded)
    modules = graph.graph.get("modules", {})
    member_of: dict[str, str] = {}
    out = nx.DiGraph()
    out.graph.update(graph.graph)
    out.graph["expanded"] = sorted(expanded)
    groups: dict[str, list[str]] = {}
    for nid, attrs in graph.nodes(data=True):
        box = group_of(attrs.get("module", ""), expanded) if attrs.get("kind") not in ("loss", "input") else None
        if box is None:
            member_of[nid] = nid
            out.add_node(nid, **attrs)
        else:
            gid = f"group:{box}"
            member_of[nid] = gid
            if gid not in groups:
                groups[gid] = []
                out.add_node(gid)  # placeholder keeps first-seen order (deterministic)
            groups[gid].append(nid)
    for gid, members in groups.items():
        out.nodes[gid].update(_group_attrs(graph, gid[len("group:"):], members, modules))
    for u, v, attrs in graph.edges(data=True):
        gu, gv = member_of[u], member_of[v]
        if gu == gv:
            continue
        if out.has_edge(gu, gv):
            out.edges[gu, gv]["count"] += attrs.get("count", 1)
        else:
            out.add_edge(gu, gv, **{**attrs, "count": attrs.get("count", 1)})
    return out


def _group_attrs(graph: nx.DiGraph, path: str, members: list[str], modules: dict) -> dict:
    info = modules.get(path, {})
    norms = [graph.nodes[m].get("grad_norm") for m in members]
    finite = [n for n in norms if n is not None and math.isfinite(n)]
    grad_norm = info.get("grad_norm")
    if grad_norm is None and finite:
        grad_norm = max(finite)  # no parameters: the strongest gradient passing through
    return {
        "kind": "group", "module": path, "module_type": info.get("type", ""),
        "label": f"{path} ({info['type']})" if info.get("type") else path,
        "members": members, "n_nodes": len(members), "grad_norm": grad_norm,
        "grad_nan": sum(graph.nodes[m].get("grad_nan") or 0 for m in members),
        "grad_inf": sum(graph.nodes[m].get("grad_inf") or 0 for m in members),
        "reachable": any(graph.nodes[m].get("reachable", True) for m in members),
        "shape": [], "op": "", "location": "", "code": "",
    }


def visible_count(graph: nx.DiGraph, expanded: set[str]) -> int:
    boxes = set()
    loose = 0
    for _, attrs in graph.nodes(data=True):
        box = group_of(attrs.get("module", ""), expanded) if attrs.get("kind") not in ("loss", "input") else None
        if box is None:
            loose += 1
        else:
            boxes.add(box)
    return loose + len(boxes)


def auto_depth(graph: nx.DiGraph, max_boxes: int = 220) -> int:
    """The deepest module depth whose collapsed view shows at most ``max_boxes`` items.

    "About 200": a stack of 200 blocks plus its embeddings and head (~210 items) should
    open as 200 block boxes, not as a single box.
    """
    modules = graph.graph.get("modules", {})
    deepest = max((depth_of(p) for p in modules), default=0)
    best = 1
    for depth in range(1, deepest + 2):
        if visible_count(graph, expanded_to_depth(graph, depth)) <= max_boxes:
            best = depth
        else:
            break
    return best
