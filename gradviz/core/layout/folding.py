"""Repeated blocks: sibling modules of one class with the same structure, run one after another.

A transformer's blocks, a ResNet stage's bottlenecks, a stack of identical layers: in a
collapsed view each would be its own box, two hundred boxes saying the same thing. A
*run* is a sequence of siblings (same parent, same class) whose subgraphs are
identical (the same ops, module paths, shapes and parameters, in the same order) and
where each one feeds the next (an edge from repeat ``i`` to repeat ``i + 1``, in
forward order). ``collapse`` draws a run's consecutive repeats that would each be a
box as one *fold* box, "Block × 200", carrying the gradient norm of every repeat
(``repeat_norms``: its parameters' gradient norm, or the largest gradient passing
through it when it has none) for a sparkline.

Opening folds is part of the ``expanded`` set every view uses: expanding a repeat
(its module path) opens it and splits the fold around it; ``unfold:<path>`` draws a
repeat as its own closed box (``unfold_markers`` for one repeat, a range or all).
Runs are found once per graph and kept in ``graph.graph['repeats']``.
"""
from __future__ import annotations

import math
from typing import Iterable

import networkx as nx

from gradviz.core.trace.modules import prefixes

UNFOLD = "unfold:"
MIN_REPEATS = 2


def find_repeats(graph: nx.DiGraph) -> list[dict]:
    """``[{parent, type, members: [path, ...]}]``: the runs of ``graph``, members in forward order.

    One pass over the nodes (signatures, forward order) and one over the edges (which
    repeat feeds the next), whatever the number of sibling families. Cached in
    ``graph.graph['repeats']``.
    """
    cached = graph.graph.get("repeats")
    if cached is not None:
        return cached
    modules = graph.graph.get("modules", {})
    families: dict[tuple[str, str], list[str]] = {}
    for path, info in modules.items():
        if path and info.get("parent") is not None:
            families.setdefault((info["parent"], info.get("type", "")), []).append(path)
    family_of = {p: key for key, members in families.items() if len(members) >= MIN_REPEATS for p in members}
    runs: list[dict] = []
    if family_of:
        order, signature, links = _scan(graph, family_of)
        for key in dict.fromkeys(family_of.values()):
            members = sorted((m for m in families[key] if m in order), key=order.__getitem__)
            for run in _split(members, signature, links):
                runs.append({"parent": key[0], "type": key[1], "members": run})
    runs.sort(key=lambda r: (r["parent"], r["members"][0]))
    graph.graph["repeats"] = runs
    return runs


def _scan(graph: nx.DiGraph, family_of: dict[str, tuple]) -> tuple[dict[str, int], dict[str, tuple], set]:
    """Forward position of each candidate module (its first op); its structure signature (the
    sorted (module path relative to it, op, kind, shape) of its nodes: order-free, so it does
    not depend on how a sort interleaves branches); and the pairs ``(a, b)`` of siblings of
    one family with an edge from ``a``'s subtree into ``b``'s (found at the edge's lowest
    common module, one pair per edge)."""
    try:
        seq = list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:
        seq = list(graph.nodes)
    order: dict[str, int] = {}
    tokens: dict[str, list] = {c: [] for c in family_of}
    held_by: dict[str, list[str]] = {}      # module path -> the candidates holding it (cached)
    for i, nid in enumerate(seq):
        attrs = graph.nodes[nid]
        module = attrs.get("module", "")
        if not module or attrs.get("kind") in ("loss", "input"):
            continue
        held = held_by.get(module)
        if held is None:
            held = held_by[module] = [q for q in prefixes(module) if q in tokens]
        if not held:
            continue
        kind = attrs.get("kind", "")
        tail = (attrs.get("op", ""), kind, tuple(attrs.get("shape") or ()))
        for q in held:
            if kind == "op":
                order.setdefault(q, i)
            tokens[q].append((module[len(q):], *tail))
    links = set()
    modules = nx.get_node_attributes(graph, "module")
    for u, v in graph.edges():
        a, b = modules.get(u) or "", modules.get(v) or ""
        if a == b or not a or not b:
            continue
        pa, pb = a.split("."), b.split(".")
        k = 0
        while k < len(pa) and k < len(pb) and pa[k] == pb[k]:
            k += 1
        if k < len(pa) and k < len(pb):   # the two children of the lowest common module
            ca, cb = ".".join(pa[:k + 1]), ".".join(pb[:k + 1])
            if ca in family_of and family_of.get(cb) == family_of[ca]:
                links.add((ca, cb))
    return order, {c: tuple(sorted(t)) for c, t in tokens.items()}, links


def _split(members: list[str], signature: dict[str, tuple], links: set) -> list[list[str]]:
    """Maximal runs of consecutive members with one signature, each feeding the next."""
    runs, current = [], members[:1]
    for prev, m in zip(members, members[1:]):
        if signature[m] and signature[m] == signature[prev] and (prev, m) in links:
            current.append(m)
        else:
            runs.append(current)
            current = [m]
    runs.append(current)
    return [r for r in runs if len(r) >= MIN_REPEATS]


def fold_map(graph: nx.DiGraph, expanded: set[str], box_of) -> dict[str, dict]:
    """``{member path: fold}`` for the repeats that fold in a view: consecutive members of a run
    that would each be drawn as a closed box (``box_of(path) == path``), not unfolded.

    Each fold is ``{id, members (paths), run}``; ``box_of`` is the view's module -> box function.
    """
    out: dict[str, dict] = {}
    for run in find_repeats(graph):
        chunk: list[str] = []
        for path in [*run["members"], None]:
            if path is not None and box_of(path) == path and UNFOLD + path not in expanded:
                chunk.append(path)
                continue
            if len(chunk) >= MIN_REPEATS:
                fold = {"id": fold_id(chunk), "members": chunk, "run": run}
                for p in chunk:
                    out[p] = fold
            chunk = []
    return out


def fold_id(paths: list[str]) -> str:
    return f"fold:{paths[0]}..{paths[-1]}"


def fold_attrs(graph: nx.DiGraph, fold: dict, nodes: list[str]) -> dict:
    """Attributes of a fold box: a group (``kind='group'``, ``fold=True``) with its repeats'
    paths and gradient norms."""
    modules = graph.graph.get("modules", {})
    paths = fold["members"]
    run = fold["run"]
    per_repeat = _repeat_norms(graph, paths, nodes, modules)
    params = [modules.get(p, {}).get("grad_norm") for p in paths]
    known = [v for v in params if v is not None]
    grad_norm = math.sqrt(math.fsum(v * v for v in known)) if known else None
    param_grad_norm = grad_norm
    if grad_norm is None:
        finite = [v for v in per_repeat if v is not None and math.isfinite(v)]
        grad_norm = max(finite) if finite else None
    mtype = run["type"]
    return {
        # ``module``: the first repeat, so the fold sits inside its parent's frame and "collapse
        # parent" / opening behave as for that repeat's own box
        "kind": "group", "fold": True, "module": paths[0], "parent": run["parent"], "module_type": mtype,
        "label": f"{mtype} × {len(paths)}", "repeats": list(paths), "repeat_norms": per_repeat,
        "run_size": len(run["members"]), "first": paths[0], "last": paths[-1],
        "members": nodes, "n_nodes": len(nodes), "grad_norm": grad_norm,
        "grad_nan": sum(graph.nodes[m].get("grad_nan") or 0 for m in nodes),
        "grad_inf": sum(graph.nodes[m].get("grad_inf") or 0 for m in nodes),
        "reachable": any(graph.nodes[m].get("reachable", True) for m in nodes),
        "param_bytes": sum(modules.get(p, {}).get("param_bytes") or 0 for p in paths),
        "activation_bytes": sum(modules.get(p, {}).get("activation_bytes") or 0 for p in paths),
        "numel": sum(modules.get(p, {}).get("numel") or 0 for p in paths), "param_grad_norm": param_grad_norm,
        "shape": [], "op": "", "location": "", "code": "",
    }


def _repeat_norms(graph: nx.DiGraph, paths: list[str], nodes: list[str], modules: dict) -> list[float | None]:
    """Per repeat: its parameters' gradient norm, else the largest gradient norm through it."""
    out: list[float | None] = [modules.get(p, {}).get("grad_norm") for p in paths]
    missing = {p: i for i, p in enumerate(paths) if out[i] is None}
    if missing:
        for nid in nodes:
            attrs = graph.nodes[nid]
            norm = attrs.get("grad_norm")
            if norm is None:
                continue
            for q in prefixes(attrs.get("module", "")):
                i = missing.get(q)
                if i is not None:
                    old = out[i]
                    if old is None or math.isnan(norm) or (not math.isnan(old) and norm > old):
                        out[i] = norm
                    break
    return out


def unfold_markers(fold: dict, which: str | Iterable[int] = "all") -> set[str]:
    """``expanded`` entries that draw repeats of a fold box (its attributes) as their own boxes:
    ``"all"``, or indices into the fold's ``repeats`` (one, or a range)."""
    repeats = fold.get("repeats") or []
    picked = repeats if which == "all" else [repeats[i] for i in which if 0 <= i < len(repeats)]
    return {UNFOLD + p for p in picked}


def parse_range(text: str, count: int) -> list[int]:
    """``"57"`` or ``"10-20"`` (1-based from the fold's first repeat, inclusive) -> 0-based
    indices; ValueError on anything else or out of range."""
    text = text.strip()
    lo, sep, hi = text.partition("-")
    a, b = int(lo), int(hi) if sep else int(lo)
    if not 1 <= a <= b <= count:
        raise ValueError(f"repeats are numbered 1 to {count}")
    return list(range(a - 1, b))
