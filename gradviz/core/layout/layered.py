"""Layered (Sugiyama-style) layout of a DAG, top to bottom, without Graphviz.

Pipeline: index nodes -> break cycles (DFS back edges are reversed) -> (clustered: a parameter's
chain leaves the graph, to sit beside the op it feeds, ``stub_sides``) -> layers (longest
path, then leaves such as parameters are pulled down to sit right above their consumer)
-> dummy vertices on long edges -> crossing reduction (``layout_order``) -> x by
neighbour pulls with order-preserving compaction -> y per layer -> edge polylines.

Everything after layering works on integer arrays with whole-array numpy operations
across *all* layers at once: autograd graphs of transformers are thousands of layers
tall and a few nodes wide, so per-layer Python loops would dominate.  The only Python
loops are O(nodes + edges) graph walks.  The result is deterministic: it depends only on
node/edge insertion order, never on hashing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping

import networkx as nx
import numpy as np

from gradviz.core.layout import clusters as cl
from gradviz.core.layout import stub_sides
from gradviz.core.runtime.gc_pause import gc_paused
from gradviz.core.layout.cluster_layers import banded_layers
from gradviz.core.layout.coords import assign_x
from gradviz.core.layout.order import Orderer, module_groups, slot_ranks
from gradviz.core.layout.types import Layout, LayoutOptions, box_sizes

Array = np.ndarray

__all__ = ["layout"]


def _acyclic(n: int, src: Array, dst: Array) -> tuple[Array, list[int]]:
    """DFS from sources (then from any node left, for cycles); returns (back-edge mask,
    topological order of the graph with back edges reversed)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for e, u in enumerate(src.tolist()):
        out[u].append(e)
    dst_l = dst.tolist()
    has_pred = np.zeros(n, dtype=bool)
    has_pred[dst] = True
    starts = np.flatnonzero(~has_pred).tolist() + list(range(n))
    state = [0] * n  # 0 unseen, 1 on the DFS stack, 2 finished
    ptr = [0] * n
    back = np.zeros(len(src), dtype=bool)
    post: list[int] = []
    for s in starts:
        if state[s]:
            continue
        state[s] = 1
        stack = [s]
        while stack:
            u = stack[-1]
            i = ptr[u]
            es = out[u]
            if i < len(es):
                ptr[u] = i + 1
                v = dst_l[es[i]]
                if state[v] == 0:
                    state[v] = 1
                    stack.append(v)
                elif state[v] == 1:
                    back[es[i]] = True
            else:
                state[u] = 2
                post.append(u)
                stack.pop()
    post.reverse()
    return back, post


def _assign_layers(n: int, src: Array, dst: Array, topo: list[int],
                   pull_down: bool) -> tuple[Array, Array]:
    """Longest path from the sources; then, sinks first, every node with at least as many
    out- as in-edges moves down to just above its first successor (shortening more edges
    than it lengthens).  Parameters thus sit right above the op that consumes them.
    Returns (longest-path layers, final layers)."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        preds[v].append(u)
        succs[u].append(v)
    layer = [0] * n
    for v in topo:
        ps = preds[v]
        if ps:
            layer[v] = max(layer[p] for p in ps) + 1
    longest = np.asarray(layer, dtype=np.int64)
    if pull_down:
        for v in reversed(topo):
            ss = succs[v]
            if ss and len(preds[v]) <= len(ss):
                layer[v] = min(layer[s] for s in ss) - 1
    return longest, np.asarray(layer, dtype=np.int64)


def _components(n: int, src: Array, dst: Array) -> Array:
    """Weakly connected components, numbered largest first (ties: first node index)."""
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v in zip(src.tolist(), dst.tolist()):
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    root = np.fromiter((find(a) for a in range(n)), dtype=np.int64, count=n)
    roots, inv, counts = np.unique(root, return_inverse=True, return_counts=True)
    rank = np.empty(len(roots), dtype=np.int64)
    rank[np.lexsort((roots, -counts))] = np.arange(len(roots))
    return rank[inv.ravel()]


def _with_cluster_links(chain: Array, src: Array, dst: Array) -> tuple[Array, Array]:
    """The edges plus a link from every node in a top-level cluster to that cluster's first node."""
    if chain.shape[1] == 0:
        return src, dst
    top = chain[:, 0]
    v = np.flatnonzero(top >= 0)
    first = np.full(int(top.max()) + 1, -1, dtype=np.int64)
    first[top[v][::-1]] = v[::-1]
    return np.concatenate([src, v]), np.concatenate([dst, first[top[v]]])


def _compact_layers(layer: Array, comp: Array) -> tuple[Array, Array]:
    """Renumber layers 0..k-1 per component (no empty layers); also return slot ids,
    consecutive per component, so slot parity alternates between adjacent layers."""
    span = int(layer.max()) - int(layer.min()) + 1
    key = comp * span + (layer - layer.min())
    _, slot = np.unique(key, return_inverse=True)
    slot = slot.ravel()
    first = np.full(int(comp.max()) + 1, len(slot), dtype=np.int64)
    np.minimum.at(first, comp, slot)
    return slot - first[comp], first


# ----------------------------------------------------------------------------- dummies


@dataclass
class _Layered:
    """Real nodes 0..n-1 followed by dummies; ``up``/``low`` join adjacent layers."""

    layer: Array  # per vertex
    comp: Array
    slot: Array
    up: Array
    low: Array
    chain_start: Array  # per edge: first dummy id (or -1)
    chain_len: Array  # per edge: number of dummies
    direct: Array  # per edge: too long for bend points, drawn straight


def _insert_dummies(n: int, src: Array, dst: Array, layer: Array, comp: Array,
                    comp_first_slot: Array, max_span: int) -> _Layered:
    k = np.maximum(layer[dst] - layer[src] - 1, 0)  # dummies per edge
    # an edge longer than max_span layers (a weight an unrolled RNN uses at each of 2,000 steps)
    # gets no bend points: it is drawn straight and left out of ordering, or it alone would add
    # millions of vertices
    direct = k > max_span
    k = np.where(direct, 0, k)
    total = int(k.sum())
    chain_start = np.full(len(src), -1, dtype=np.int64)
    offsets = n + np.cumsum(k) - k
    chain_start[k > 0] = offsets[k > 0]
    edge_of = np.repeat(np.arange(len(src)), k)
    j = np.arange(total) - (offsets - n)[edge_of]  # index along the chain
    d_ids = n + np.arange(total)
    d_layer = layer[src][edge_of] + 1 + j
    # layered edges: short edges, (upper neighbour -> dummy), (last dummy -> target)
    short = (k == 0) & ~direct
    chained = k > 0
    d_up = np.where(j == 0, src[edge_of], d_ids - 1)
    last = chain_start[chained] + k[chained] - 1
    up = np.concatenate([src[short], d_up, last])
    low = np.concatenate([dst[short], d_ids, dst[chained]])
    v_layer = np.concatenate([layer, d_layer])
    v_comp = np.concatenate([comp, comp[src][edge_of]])
    slot = comp_first_slot[v_comp] + v_layer
    return _Layered(v_layer, v_comp, slot, up, low, chain_start, k, direct)


def _vertex_modules(graph: nx.DiGraph, nodes: list, src: Array, dst: Array, lay: _Layered,
                    enabled: bool) -> tuple[Array, list[str]]:
    """Module index per vertex; a dummy gets the common module of its edge's ends."""
    modules: list[str] = []
    ids: dict[str, int] = {}
    n = len(nodes)
    real = np.empty(n, dtype=np.int64)
    for i, node in enumerate(nodes):
        m = str(graph.nodes[node].get("module") or "") if enabled else ""
        real[i] = ids.setdefault(m, len(ids))
    modules = list(ids)
    long_edges = np.flatnonzero(lay.chain_len > 0)
    pair_cache: dict[tuple[int, int], int] = {}
    edge_mod = np.empty(len(long_edges), dtype=np.int64)
    ends = zip(real[src[long_edges]].tolist(), real[dst[long_edges]].tolist())
    for i, (a, b) in enumerate(ends):
        key = (a, b)
        if key not in pair_cache:
            pa, pb = modules[a].split("."), modules[b].split(".")
            common = []
            for x, y in zip(pa, pb):
                if x != y:
                    break
                common.append(x)
            m = ".".join(common)
            if m not in ids:
                ids[m] = len(ids)
                modules.append(m)
            pair_cache[key] = ids[m]
        edge_mod[i] = pair_cache[key]
    dummy_mod = np.repeat(edge_mod, lay.chain_len[long_edges])
    return np.concatenate([real, dummy_mod]), modules


# ----------------------------------------------------------------------------- x and y


def _place_components(x: Array, lo_ext: Array, hi_ext: Array, comp: Array, gap: float) -> Array:
    """Shift components side by side, left edge of the whole drawing at 0 (``lo_ext``/``hi_ext``:
    each vertex's extent left and right of its centre)."""
    n_comp = int(comp.max()) + 1
    lo = np.full(n_comp, np.inf)
    hi = np.full(n_comp, -np.inf)
    np.minimum.at(lo, comp, x - lo_ext)
    np.maximum.at(hi, comp, x + hi_ext)
    extent = hi - lo
    start = np.concatenate([[0.0], np.cumsum(extent + gap)[:-1]])
    return x + (start - lo)[comp]


def _initial_rank(lay: _Layered, n: int, topo: list[int], dst: Array) -> Array:
    """Start from DFS (topological) order; a dummy goes just before its edge's target."""
    nv = len(lay.slot)
    key = np.empty(nv)
    key[np.asarray(topo, dtype=np.int64)] = np.arange(n, dtype=float)
    long_edges = np.flatnonzero(lay.chain_len > 0)
    key[n:] = np.repeat(key[dst[long_edges]] - 0.5, lay.chain_len[long_edges])
    order = np.lexsort((np.arange(nv), key, lay.slot))
    return slot_ranks(lay.slot, order)


def _parameter_branches(graph: nx.DiGraph, nodes: list, src: Array, dst: Array, topo: list[int]) -> Array:
    """Nodes that only parameters feed: the parameters and ops on them alone (a weight's transpose)."""
    n = len(nodes)
    table = graph.nodes
    is_param = [table[v].get("kind") == "param" for v in nodes]
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        preds[v].append(u)
    stub = [False] * n
    for v in topo:
        ps = preds[v]
        stub[v] = is_param[v] or (bool(ps) and all(stub[p] for p in ps))
    return np.asarray(stub, dtype=bool)


def _with_placeholders(lay: _Layered, rank: Array, trunk: Array, clusters: cl.Clusters,
                       comp_first_slot: Array):
    """Append the clusters' placeholders (``clusters.placeholders``) as edgeless vertices, last in
    their layers until ordering moves them into their cluster."""
    p_slot, p_comp, p_chain = cl.placeholders(clusters, lay.slot, lay.comp)
    if len(p_slot) == 0:
        return lay, rank, trunk, clusters
    width = np.bincount(lay.slot, minlength=int(lay.slot.max()) + 1)
    extra = np.zeros(len(p_slot), dtype=np.int64)
    o = np.argsort(p_slot, kind="stable")
    first = np.r_[True, p_slot[o][1:] != p_slot[o][:-1]]
    run = np.arange(len(o)) - np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))
    extra[o] = run
    p_rank = width[p_slot] + extra
    lay = _Layered(np.concatenate([lay.layer, p_slot - comp_first_slot[p_comp]]),
                   np.concatenate([lay.comp, p_comp]), np.concatenate([lay.slot, p_slot]),
                   lay.up, lay.low, lay.chain_start, lay.chain_len, lay.direct)
    clusters = cl.Clusters(clusters.names, clusters.parent, clusters.height,
                           np.concatenate([clusters.chain, p_chain]))
    return (lay, np.concatenate([rank, p_rank]), np.concatenate([trunk, np.zeros(len(p_slot), dtype=trunk.dtype)]),
            clusters)


# ----------------------------------------------------------------------------- entry point


def layout(graph: nx.DiGraph, options: LayoutOptions | None = None,
           sizes: Mapping[Hashable, tuple[float, float]] | None = None,
           label_room: Mapping[str, float] | None = None) -> Layout:
    """Lay out ``graph`` top to bottom; see the module docstring for the pipeline.

    ``sizes``: (width, height) of each node's box, an input (the renderer measures its
    text); nodes it lacks fall back to ``node_size``. The cycle collector is paused meanwhile:
    the walks allocate lists by the ten thousand, and each full collection would re-scan the
    caller's whole graph (a third of the time at 11,600 nodes).

    ``label_room``: module path -> the width its frame's label takes at the frame's top-left (the
    renderer measures it); the clustered layout keeps the edges entering the module's first row
    that far right of its left border, so none runs through the label."""
    with gc_paused():
        return _layout(graph, options, sizes, label_room)


def _layout(graph: nx.DiGraph, options: LayoutOptions | None,
            sizes: Mapping[Hashable, tuple[float, float]] | None, label_room: Mapping[str, float] | None) -> Layout:
    opts = options or LayoutOptions()
    nodes = list(graph.nodes)
    n = len(nodes)
    if n == 0:
        return Layout({}, {}, {}, {}, 0.0, 0.0)
    index = {node: i for i, node in enumerate(nodes)}
    edge_list = [(u, v) for u, v in graph.edges if u != v]
    src = np.fromiter((index[u] for u, _ in edge_list), dtype=np.int64, count=len(edge_list))
    dst = np.fromiter((index[v] for _, v in edge_list), dtype=np.int64, count=len(edge_list))
    size = np.asarray(box_sizes(graph, nodes, sizes), dtype=float).reshape(n, 2)

    back, topo = _acyclic(n, src, dst)
    s2 = np.where(back, dst, src)  # back edges reversed: the layered graph is a DAG
    d2 = np.where(back, src, dst)
    use_clusters = opts.group_by_module and opts.clusters
    if not use_clusters:
        return _layered(graph, nodes, edge_list, back, s2, d2, topo, size, opts)
    stub = _parameter_branches(graph, nodes, s2, d2, topo)
    param = np.fromiter((graph.nodes[v].get("kind") == "param" for v in nodes), dtype=bool, count=n)
    sides = stub_sides.find(n, s2, d2, param, cl.build(graph, nodes).chain, size[:, 0], opts.node_gap, topo)
    if not sides.any:
        return _layered(graph, nodes, edge_list, back, s2, d2, topo, size, opts, stub, (sides.left, sides.right),
                        label_room=label_room)
    # the side chains leave the layering: their hosts are laid out as wider boxes
    keep = sides.host < 0
    new = np.cumsum(keep) - 1
    on = keep[s2] & keep[d2]
    kept = np.flatnonzero(keep)
    row_h = size[:, 1].copy()
    np.maximum.at(row_h, sides.host[~keep], size[~keep, 1])
    inner = _layered(graph, [nodes[i] for i in kept.tolist()], [e for e, k in zip(edge_list, on.tolist()) if k],
                     back[on], new[s2[on]], new[d2[on]], [new[v] for v in topo if keep[v]], size[keep], opts,
                     stub[keep], (sides.left[keep], sides.right[keep]), row_h[keep], label_room)
    return stub_sides.placed(inner, nodes, edge_list, s2, d2, back, size, sides)


def _layered(graph: nx.DiGraph, nodes: list, edge_list: list, back: Array, s2: Array, d2: Array, topo: list[int],
             size: Array, opts: LayoutOptions, stub: Array | None = None, extents: tuple[Array, Array] | None = None,
             row_h: Array | None = None, label_room: Mapping[str, float] | None = None) -> Layout:
    """Layers, order, x and y of ``nodes`` (edges ``s2 -> d2``, a DAG; ``back``: reversed edges).
    With ``stub`` (the parameter branches) the layout is clustered; ``extents``: each box's (left,
    right) extent from its centre, wider than its size where side boxes sit beside it; ``row_h``:
    the height each box needs its layer to have."""
    n = len(nodes)
    use_clusters = stub is not None
    if use_clusters:
        clusters = cl.build(graph, nodes)
        lp, layer = banded_layers(n, s2, d2, clusters, opts.pull_down_sources)
    else:
        lp, layer = _assign_layers(n, s2, d2, topo, opts.pull_down_sources)
    if use_clusters:   # a module's nodes (a frozen parameter with no edge) join its component
        comp = _components(n, *_with_cluster_links(clusters.chain, s2, d2))
    else:
        comp = _components(n, s2, d2)
    layer, comp_first_slot = _compact_layers(layer, comp)
    lay = _insert_dummies(n, s2, d2, layer, comp, comp_first_slot, opts.max_span)
    nv = len(lay.slot)

    rank = _initial_rank(lay, n, topo, d2)
    trunk = np.concatenate([lp, np.repeat(lp[s2], lay.chain_len) + 1])
    clustered = None
    if use_clusters:
        clusters = cl.with_dummies(clusters, s2, d2, lay.chain_len, layer)
        lay, rank, trunk, clusters = _with_placeholders(lay, rank, trunk, clusters, comp_first_slot)
        nv = len(lay.slot)
        orderer = Orderer(lay.slot, lay.up, lay.low, cl.order_groups(clusters.chain), clustered=True)
        # layers each dummy's edge still runs below it: long edges keep the straight blocks
        k = lay.chain_len
        left = np.repeat(k, k) - (np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))
        reach = np.zeros(nv, dtype=np.int64)
        reach[n:n + len(left)] = left
        v_stub = np.zeros(nv, dtype=bool)
        v_stub[:n] = stub
        v_stub[n:n + len(left)] = np.repeat(stub[s2], k)
        room = None
        if label_room:
            room = np.asarray([float(label_room.get(name, 0.0)) for name in clusters.names])
        clustered = (clusters, opts, reach, v_stub, room)
    else:
        vmod, modules = _vertex_modules(graph, nodes, s2, d2, lay, opts.group_by_module)
        groups = module_groups(vmod, modules) if opts.group_by_module else []
        orderer = Orderer(lay.slot, lay.up, lay.low, groups)
    rank = orderer.run(rank, opts.sweeps)

    zeros = np.zeros(nv - n)
    if extents is None:
        lo_ext = hi_ext = np.concatenate([size[:, 0], zeros]) / 2
    else:
        lo_ext, hi_ext = np.concatenate([extents[0], zeros]), np.concatenate([extents[1], zeros])
    if clustered is not None:
        clustered = clustered[:4] + ((lo_ext, hi_ext), clustered[4])
    x = assign_x(lay.slot, rank, lay.up, lay.low, lo_ext + hi_ext, n, trunk, opts.node_gap,
                 opts.x_passes, clustered)
    x = _place_components(x, lo_ext, hi_ext, lay.comp, opts.component_gap)

    n_layers = int(layer.max()) + 1
    layer_h = np.zeros(n_layers)
    np.maximum.at(layer_h, layer, size[:, 1] if row_h is None else row_h)
    top = np.concatenate([[0.0], np.cumsum(layer_h + opts.layer_gap)[:-1]])
    y = (top + layer_h / 2)[lay.layer]

    return _build_result(nodes, edge_list, back, s2, d2, lay, x, y, size, layer,
                         float(top[-1] + layer_h[-1]), hi_ext)


def _build_result(nodes: list, edge_list: list, back: Array, s2: Array, d2: Array,
                  lay: _Layered, x: Array, y: Array, size: Array, layer: Array,
                  height: float, hi_ext: Array) -> Layout:
    n = len(nodes)
    xl, yl = x.tolist(), y.tolist()
    half_h = (size[:, 1] / 2).tolist()
    pos = {node: (xl[i], yl[i]) for i, node in enumerate(nodes)}
    sizes = {node: (float(w), float(h)) for node, (w, h) in zip(nodes, size.tolist())}
    edges: dict[tuple, list[tuple[float, float]]] = {}
    starts, lens = lay.chain_start.tolist(), lay.chain_len.tolist()
    for e, (a, b) in enumerate(zip(s2.tolist(), d2.tolist())):
        pts = [(xl[a], yl[a] + half_h[a])]
        d0 = starts[e]
        pts.extend(zip(xl[d0:d0 + lens[e]], yl[d0:d0 + lens[e]]))
        pts.append((xl[b], yl[b] - half_h[b]))
        if back[e]:
            pts.reverse()  # drawn against the flow: from u's top to v's bottom
        edges[edge_list[e]] = pts
    right = float(np.max(x + hi_ext))
    return Layout(pos, sizes, edges, dict(zip(nodes, layer.tolist())), right, height,
                  n_dummies=int(lay.chain_len.sum()))
