"""A parameter's branch drawn beside the op it feeds, in that op's layer (the clustered layout, #29).

A module's band of layers starts at its first node; with a weight (and its transpose) in layers of
their own above the op that reads it, every Linear adds two layers to the data path, and the edge
into the module grows by as much (measured on the samples: 1.14x today's total edge length on
average, 1.80x on ConvNeXt). Here a *side chain* (a parameter, then ops that only it feeds, each with
one input and one consumer in the module, ending at the op where another input joins) leaves the
layering: its boxes sit in a row beside the op they feed, joined by level edges, inside the same
module's frame. A parameter with no edge at all (frozen, unused) sits beside the first op of its
module.

The layered layout then sees the op as one wider box with a left and a right extent (``Sides``).
Which side: the longer chains first, each to the side with less width so far (left on a tie: the
frame's label, at its top-left, then lies over parameters, not over the edge coming into the op), so
the op stays near the middle of its row. Pure numpy and O(nodes + edges) Python walks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradviz.core.layout.types import Layout

Array = np.ndarray

MAX_CHAIN = 3   # longer branches stay in layers of their own: a row of four boxes is wide enough


@dataclass
class Sides:
    host: Array    # per node: the node it sits beside (-1: laid out as usual)
    offset: Array  # per node: x of its centre minus its host's (0 for others)
    left: Array    # per node: extent left of its centre, its side boxes included
    right: Array   # per node: extent right of its centre

    @property
    def any(self) -> bool:
        return bool((self.host >= 0).any())


def _chains(n: int, src: Array, dst: Array, param: Array, chain: Array) -> list[tuple[int, list[int]]]:
    """(host, nodes from the host outward) for every side chain: from a parameter with one consumer
    down through ops with one input and one consumer in the same module (at most ``MAX_CHAIN``
    boxes); the host is the first op where that stops (it has other inputs, or its consumer is in
    another module)."""
    preds = np.bincount(dst, minlength=n).tolist()
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        succs[u].append(v)
    rows = [tuple(r) for r in chain.tolist()]
    found = []
    for p in np.flatnonzero(param).tolist():
        if preds[p] or len(succs[p]) != 1:
            continue
        nodes, w = [p], succs[p][0]
        while rows[w] == rows[p] and preds[w] == 1 and len(nodes) < MAX_CHAIN and len(succs[w]) == 1 \
                and rows[succs[w][0]] == rows[p]:
            nodes.append(w)
            w = succs[w][0]
        if rows[w] == rows[p]:
            found.append((w, nodes[::-1]))
    return found


def _loose(n: int, src: Array, dst: Array, param: Array, chain: Array, topo: list[int],
           taken: Array) -> list[tuple[int, list[int]]]:
    """Parameters without an edge, each beside the first node (topological order) of its module that
    is laid out as usual."""
    degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    loose = np.flatnonzero(param & (degree == 0))
    if len(loose) == 0 or chain.shape[1] == 0:
        return []
    rows = [tuple(r) for r in chain.tolist()]
    first: dict[tuple, int] = {}
    for v in topo:
        if not taken[v] and not (param[v] and degree[v] == 0) and rows[v][0] >= 0:
            first.setdefault(rows[v], v)
    return [(first[rows[v]], [int(v)]) for v in loose.tolist() if rows[v] in first]


def find(n: int, src: Array, dst: Array, param: Array, chain: Array, width: Array, gap: float,
         topo: list[int]) -> Sides:
    """The side chains of a DAG ``src -> dst`` of ``n`` nodes (``param``: which are parameters;
    ``chain``: each node's clusters, ``clusters.Clusters.chain``) and where each box goes."""
    host = np.full(n, -1, dtype=np.int64)
    offset = np.zeros(n)
    left, right = width / 2, width / 2
    left, right = left.copy(), right.copy()
    chains = _chains(n, src, dst, param, chain)
    for h, nodes in chains:
        host[nodes] = h
    chains += _loose(n, src, dst, param, chain, topo, host >= 0)
    by_host: dict[int, list[list[int]]] = {}
    for h, nodes in chains:
        host[nodes] = h
        by_host.setdefault(h, []).append(nodes)
    for h, group in by_host.items():
        group.sort(key=lambda c: -float(width[c].sum()))   # stable: ties keep the inputs' order
        for nodes in group:
            to_right = right[h] < left[h]
            edge = right[h] if to_right else left[h]
            for v in nodes:
                centre = edge + gap + width[v] / 2
                offset[v] = centre if to_right else -centre
                edge = centre + width[v] / 2
            if to_right:
                right[h] = edge
            else:
                left[h] = edge
    return Sides(host, offset, left, right)


def placed(inner: Layout, nodes: list, edge_list: list, s2: Array, d2: Array, back: Array, size: Array,
           sides: Sides) -> Layout:
    """``inner`` (the layout without the side chains) with each side box beside its host, in its row,
    and their edges horizontal, from side to side."""
    pos, sizes, layer, edges = dict(inner.pos), dict(inner.size), dict(inner.layer), dict(inner.edges)
    hosts = sides.host.tolist()
    for i in np.flatnonzero(sides.host >= 0).tolist():
        hx, hy = pos[nodes[hosts[i]]]
        pos[nodes[i]] = (hx + float(sides.offset[i]), hy)
        sizes[nodes[i]] = (float(size[i, 0]), float(size[i, 1]))
        layer[nodes[i]] = layer[nodes[hosts[i]]]
    for e in np.flatnonzero((sides.host[s2] >= 0) | (sides.host[d2] >= 0)).tolist():
        a, b = nodes[s2[e]], nodes[d2[e]]
        (ax, ay), (bx, by) = pos[a], pos[b]
        toward = 1.0 if bx >= ax else -1.0
        pts = [(ax + toward * sizes[a][0] / 2, ay), (bx - toward * sizes[b][0] / 2, by)]
        edges[edge_list[e]] = pts[::-1] if back[e] else pts
    xs = np.asarray([pos[v][0] for v in nodes])
    right = float(np.max(xs + size[:, 0] / 2))
    in_order = [edge_list[e] for e in range(len(edge_list))]      # the graph's node and edge order
    return Layout({v: pos[v] for v in nodes}, {v: sizes[v] for v in nodes}, {e: edges[e] for e in in_order},
                  {v: layer[v] for v in nodes}, max(right, inner.width), inner.height, inner.n_dummies)
