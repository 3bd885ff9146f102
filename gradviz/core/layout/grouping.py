"""Collapse a traced graph's module tree into boxes, and expand them again.

A node is drawn inside the outermost module on its path that is *not* expanded;
when every module on its path is expanded it is drawn on its own. Consecutive
repeats of a block (``core/layout/folding.py``) that would each be a closed box are drawn as
one fold box ("Block × 200"). Edges between boxes are kept (one edge per pair,
``count`` says how many it stands for).
"""
from __future__ import annotations

import math
from typing import Iterable

import networkx as nx

from gradviz.core.layout.box_facts import box_facts
from gradviz.core.layout.folding import find_repeats, fold_attrs, fold_map
from gradviz.core.trace.modules import depth_of, prefixes


def expanded_to_depth(graph: nx.DiGraph, depth: int, fold: bool = True) -> set[str]:
    """Module paths to expand so that modules at ``depth`` are the visible boxes; with ``fold``, a
    visible box that holds nothing but one run of repeated blocks is opened onto its fold
    (``run_containers``)."""
    expanded = {p for p in graph.graph.get("modules", {}) if p and depth_of(p) < depth}
    return expanded | run_containers(graph, expanded) if fold else expanded


def run_containers(graph: nx.DiGraph, expanded: set[str]) -> set[str]:
    """Closed boxes of this view that hold one run of repeated blocks and nothing else (a ModuleList
    of 80 decoder layers): opening one draws the run's fold box ("LlamaDecoderLayer × 80", with its
    sparkline) where the container's box ("ModuleList · 8,320 nodes") said nothing, one box either way.
    A container that is itself one of a run of repeats stays closed: its run folds it with its siblings."""
    modules = graph.graph.get("modules", {})
    runs = find_repeats(graph)
    repeats = {m for run in runs for m in run["members"]}   # a repeat itself folds at its own level
    out = set()
    for run in runs:
        parent = run["parent"]
        if (not parent or parent in expanded or parent in repeats
                or any(q not in expanded for q in prefixes(parent)[:-1])):
            continue
        children = [c for c, info in modules.items() if info.get("parent") == parent and info.get("nodes")]
        own = modules.get(parent, {}).get("nodes", 0) - sum(modules[c]["nodes"] for c in children)
        if own == 0 and sorted(children) == sorted(run["members"]):
            out.add(parent)
    return out


def group_of(module: str, expanded: set[str]) -> str | None:
    """The box a node of ``module`` falls into, or None when it is shown on its own."""
    for prefix in prefixes(module):
        if prefix not in expanded:
            return prefix
    return None


def _assign(graph: nx.DiGraph, expanded: set[str], fold: bool) -> tuple[dict[str, str], dict[str, dict]]:
    """Node id -> the id it is drawn as (itself, ``group:<path>`` or ``fold:<first>..<last>``),
    and the folds of this view by id."""
    folds = fold_map(graph, expanded, lambda p: group_of(p, expanded)) if fold else {}
    member_of: dict[str, str] = {}
    cache: dict[str, str | None] = {}
    for nid, attrs in graph.nodes(data=True):
        if attrs.get("kind") in ("loss", "input"):
            member_of[nid] = nid
            continue
        module = attrs.get("module", "")
        if module not in cache:
            box = group_of(module, expanded)
            cache[module] = None if box is None else (folds[box]["id"] if box in folds else f"group:{box}")
        member_of[nid] = cache[module] or nid
    return member_of, {f["id"]: f for f in folds.values()}


def collapse(graph: nx.DiGraph, depth: int | None = None, expanded: Iterable[str] | None = None,
             fold: bool = True) -> nx.DiGraph:
    """The graph with unexpanded modules merged into ``group:<path>`` nodes and, with ``fold``,
    runs of repeated blocks into ``fold:<first>..<last>`` nodes.

    Give ``depth`` (modules at that depth of the module tree become the boxes:
    1 = one box per top-level module; deeper than the tree = nothing collapsed) or
    an explicit set of ``expanded`` module paths (with ``unfold:<path>`` entries for
    repeats drawn on their own). Ids of ungrouped nodes are unchanged. The view's
    ``graph['fold_of']`` maps each folded repeat's path to its fold box.
    """
    if expanded is None:
        expanded = expanded_to_depth(graph, 1 if depth is None else max(depth, 1), fold)
    expanded = set(expanded)
    modules = graph.graph.get("modules", {})
    member_of, folds = _assign(graph, expanded, fold)
    out = nx.DiGraph()
    out.graph.update(graph.graph)
    out.graph["expanded"] = sorted(expanded)
    out.graph["fold_of"] = {p: fid for fid, f in folds.items() for p in f["members"]}
    groups: dict[str, list[str]] = {}
    for nid, attrs in graph.nodes(data=True):
        box = member_of[nid]
        if box == nid:
            out.add_node(nid, **attrs)
            continue
        if box not in groups:
            groups[box] = []
            out.add_node(box)  # placeholder keeps first-seen order (deterministic)
        groups[box].append(nid)
    meta = bool(graph.graph.get("meta"))
    for gid, members in groups.items():
        if gid in folds:
            attrs = fold_attrs(graph, folds[gid], members)
        else:
            attrs = _group_attrs(graph, gid[len("group:"):], members, modules)
        attrs["facts"] = box_facts(attrs.get("numel"), attrs.get("param_grad_norm"), attrs.get("activation_bytes"),
                                   attrs["n_nodes"], meta)
        out.nodes[gid].update(attrs)
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
        "param_bytes": info.get("param_bytes"), "activation_bytes": info.get("activation_bytes"),
        "numel": info.get("numel"), "param_grad_norm": info.get("grad_norm"),
        "shape": [], "op": "", "location": "", "code": "",
    }


def visible_count(graph: nx.DiGraph, expanded: set[str], fold: bool = True) -> int:
    """How many boxes and loose nodes ``collapse(graph, expanded=expanded, fold=fold)`` draws."""
    member_of, _ = _assign(graph, set(expanded), fold)
    return len(set(member_of.values()))


def auto_depth(graph: nx.DiGraph, max_boxes: int = 220, fold: bool = True) -> int:
    """The deepest module depth whose collapsed view shows at most ``max_boxes`` items.

    "About 200": a stack of 200 blocks plus its embeddings and head (~210 items) should
    open as 200 block boxes, not as a single box (or, folded, as one "Block × 200" box
    among a handful).
    """
    modules = graph.graph.get("modules", {})
    deepest = max((depth_of(p) for p in modules), default=0)
    best = 1
    for depth in range(1, deepest + 2):
        if visible_count(graph, expanded_to_depth(graph, depth, fold), fold) <= max_boxes:
            best = depth
        else:
            break
    return best
