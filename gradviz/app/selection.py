"""What to highlight for a selected node, and arrow-key neighbours. Pure networkx."""
from __future__ import annotations

import networkx as nx


def highlight_for(view: nx.DiGraph, nid: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Nodes and edges to highlight when ``nid`` is selected.

    A parameter (or a group holding parameters, or an input): every path from it to
    the loss (its descendants that are ancestors of a root). An op: its inputs and
    outputs, with the edges to them.
    """
    if nid not in view:
        return set(), set()
    attrs = view.nodes[nid]
    kind = attrs.get("kind")
    if kind in ("param", "input", "leaf"):
        roots = [r for r in view.graph.get("roots", ["loss"]) if r in view]
        down = nx.descendants(view, nid)
        on_path: set[str] = set()
        for r in roots:
            if r in down:
                on_path |= down & (nx.ancestors(view, r) | {r})
        nodes = on_path | {nid}
        edges = {(u, v) for u in nodes for v in view.successors(u) if v in nodes}
        return nodes, edges
    preds = set(view.predecessors(nid))
    succs = set(view.successors(nid))
    edges = {(p, nid) for p in preds} | {(nid, s) for s in succs}
    return preds | succs | {nid}, edges


def neighbour(view: nx.DiGraph, layout, nid: str, direction: str) -> str | None:
    """The node the arrow key ``direction`` (up/down/left/right) moves to from ``nid``.

    Up goes to a producer (input) of the node, Down to a consumer; of several, the one
    closest in x. Left/Right step to the neighbour in the same layer.
    """
    if layout is None or nid not in layout.pos:
        return None
    x, _ = layout.pos[nid]
    if direction in ("up", "down"):
        cands = list(view.predecessors(nid) if direction == "up" else view.successors(nid))
        cands = [c for c in cands if c in layout.pos]
        if not cands:
            return None
        return min(cands, key=lambda c: (abs(layout.pos[c][0] - x), layout.pos[c][1]))
    layer = layout.layer.get(nid)
    row = sorted((n for n, l in layout.layer.items() if l == layer and n in layout.pos),
                 key=lambda n: layout.pos[n][0])
    i = row.index(nid)
    j = i - 1 if direction == "left" else i + 1
    return row[j] if 0 <= j < len(row) else None
