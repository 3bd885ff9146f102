"""The module tree as nested clusters of the layered layout (a compound graph), in arrays.

Every vertex (real node, long-edge dummy) gets a *chain*: the cluster ids of the modules it is
drawn inside, outermost first (``-1`` past its depth). A real node sits in its module and all of
that module's parents; a collapsed box ``group:M`` in M's parents (it *is* M); inputs and the loss
in none. A dummy sits in the clusters both ends of its edge share, so an edge between two modules
runs outside both. From the chains come

- the *spans*: the layers from a cluster's first vertex to its last. Where a span has a layer with
  no vertex of the cluster (a module used at two depths of the graph), a zero-width *placeholder*
  vertex is added there, so the cluster occupies every layer of its span and nothing of another
  module can sit inside its rectangle (``placeholders``);
- the ordering groups (``order_groups``): per depth, the cluster of each vertex or a group of its
  own, which ``order.Orderer`` keeps contiguous and in one order across all layers;
- the x constraints (``constraints``): each cluster has a left and a right border; its vertices and
  child clusters lie between them with a margin, and in a layer two neighbours that belong to
  different child clusters of their common cluster keep those clusters' borders apart. With one
  sibling order in every layer those constraints have no cycle, so every cluster is one rectangle.

No Qt, whole-array numpy; Python loops only over distinct module paths.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

Array = np.ndarray


@dataclass
class Clusters:
    names: list[str]   # cluster id -> module path
    parent: Array      # cluster id -> parent cluster id (-1: top level)
    height: Array      # levels of clusters inside (0: innermost)
    chain: Array       # (vertices, depth): cluster id at each depth, -1 past the vertex's depth

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def innermost(self) -> Array:
        """Per vertex, its innermost cluster (-1: in none)."""
        if self.chain.shape[1] == 0:
            return np.full(len(self.chain), -1, dtype=np.int64)
        depth = (self.chain >= 0).sum(axis=1)
        return np.where(depth > 0, self.chain[np.arange(len(self.chain)), np.maximum(depth - 1, 0)], -1)


def node_cluster_path(attrs: dict) -> str:
    """The module whose frame a node is drawn inside: its own module, a collapsed box's parent, or
    none for inputs and the loss (the same rule as the frames, ``render.primitives.frame_nesting``)."""
    kind = attrs.get("kind")
    if kind in ("loss", "input"):
        return ""
    module = str(attrs.get("module") or "")
    return module.rpartition(".")[0] if kind == "group" else module


def build(graph: nx.DiGraph, nodes: list) -> Clusters:
    """The clusters of ``graph`` and the chains of its nodes (in ``nodes`` order)."""
    ids: dict[str, int] = {}
    parent: list[int] = []
    path_chain: dict[str, list[int]] = {}

    def chain_of(path: str) -> list[int]:
        got = path_chain.get(path)
        if got is None:
            got = []
            if path:
                head, _, _ = path.rpartition(".")
                got = chain_of(head) + [ids.setdefault(path, len(ids))]
                if len(parent) < len(ids):
                    parent.append(got[-2] if len(got) > 1 else -1)
            path_chain[path] = got
        return got

    by_key: dict[tuple, int] = {}        # (kind, module) -> index of its chain in ``distinct``
    distinct: list[list[int]] = []

    def node_chain(attrs: dict) -> int:
        key = (attrs.get("kind"), attrs.get("module"))
        got = by_key.get(key)
        if got is None:
            got = by_key[key] = len(distinct)
            distinct.append(chain_of(node_cluster_path(attrs)))
        return got

    table = graph.nodes
    which = np.fromiter((node_chain(table[v]) for v in nodes), dtype=np.int64, count=len(nodes))
    depth = max((len(c) for c in distinct), default=0)
    rows = np.full((len(distinct), depth), -1, dtype=np.int64)
    for i, c in enumerate(distinct):
        rows[i, :len(c)] = c
    real = rows[which] if len(nodes) else np.zeros((0, depth), dtype=np.int64)
    names = list(ids)
    par = np.asarray(parent, dtype=np.int64)
    height = np.zeros(len(names), dtype=np.int64)
    for c in sorted(range(len(names)), key=lambda k: -names[k].count(".")):
        if par[c] >= 0:
            height[par[c]] = max(height[par[c]], height[c] + 1)
    return Clusters(names, par, height, real)


def with_dummies(clusters: Clusters, src: Array, dst: Array, chain_len: Array, layer: Array) -> Clusters:
    """The chains of the nodes followed by those of each long edge's dummies (edges ``src -> dst``
    with ``chain_len`` dummies each, in edge order, ``layer`` per node). A dummy is in the clusters
    both ends share and, in the layers of the cluster its edge enters (or leaves), in that one too:
    the edge crosses a frame's border at its top (or bottom), not at its side."""
    real = clusters.chain
    long_edges = np.flatnonzero(chain_len > 0)
    k = chain_len[long_edges]
    a = np.repeat(real[src[long_edges]], k, axis=0)
    b = np.repeat(real[dst[long_edges]], k, axis=0)
    start = np.repeat(layer[src[long_edges]], k)
    l = (start + 1 + np.arange(len(start)) - np.repeat(np.cumsum(k) - k, k))[:, None]
    if clusters.n == 0 or real.shape[1] == 0:
        dummy = np.full((len(l), real.shape[1]), -1, dtype=np.int64)
        return Clusters(clusters.names, clusters.parent, clusters.height, np.concatenate([real, dummy]))
    v, d = np.nonzero(real >= 0)
    c = real[v, d]
    lo = np.full(clusters.n, np.iinfo(np.int64).max)
    hi = np.full(clusters.n, -1)
    np.minimum.at(lo, c, layer[v])
    np.maximum.at(hi, c, layer[v])
    b_on = np.cumprod((b >= 0) & (lo[np.maximum(b, 0)] <= l), axis=1).astype(bool)
    a_on = np.cumprod((a >= 0) & (hi[np.maximum(a, 0)] >= l), axis=1).astype(bool)
    shared = np.cumprod((a == b) & (a >= 0), axis=1).astype(bool)
    depth = real.shape[1]
    kk = np.minimum(shared.sum(axis=1), depth - 1)
    rows = np.arange(len(l))
    into_b = b_on[rows, kk] & ~shared[rows, kk]
    out_of_a = a_on[rows, kk] & ~shared[rows, kk] & ~into_b
    dummy = np.where(shared, a, -1)
    dummy = np.where(into_b[:, None] & b_on, b, dummy)
    dummy = np.where(out_of_a[:, None] & a_on, a, dummy)
    return Clusters(clusters.names, clusters.parent, clusters.height, np.concatenate([real, dummy]))


def edge_items(chain: Array, src: Array, dst: Array) -> tuple[Array, Array]:
    """Per edge, the cluster on each side that the edge leaves / enters: the child of the clusters
    both ends share that holds the end (-1: the end itself sits in the shared cluster)."""
    if chain.shape[1] == 0:
        none = np.full(len(src), -1, dtype=np.int64)
        return none, none
    a, b = chain[src], chain[dst]
    depth = chain.shape[1]
    common = np.cumprod((a == b) & (a >= 0), axis=1).sum(axis=1)
    k = np.minimum(common, depth - 1)
    rows = np.arange(len(src))
    left = np.where(common < depth, a[rows, k], -1)
    right = np.where(common < depth, b[rows, k], -1)
    return left, right


def placeholders(clusters: Clusters, slot: Array, comp: Array) -> tuple[Array, Array, Array]:
    """(slot, component, chain) of the placeholders: one per layer of a cluster's span (per component) that
    holds no vertex of the cluster. Nested clusters come out right by themselves: a placeholder of
    a cluster is in its parents too."""
    chain = clusters.chain
    none = np.zeros(0, dtype=np.int64)
    if clusters.n == 0:
        return none, none, np.zeros((0, chain.shape[1]), dtype=np.int64)
    n_comp = int(comp.max()) + 1
    v, d = np.nonzero(chain >= 0)
    key = chain[v, d] * n_comp + comp[v]          # (cluster, component)
    n_keys = clusters.n * n_comp
    lo = np.full(n_keys, np.iinfo(np.int64).max)
    hi = np.full(n_keys, -1)
    np.minimum.at(lo, key, slot[v])
    np.maximum.at(hi, key, slot[v])
    used = np.flatnonzero(hi >= 0)
    span = hi[used] - lo[used] + 1
    k = np.repeat(used, span)
    s = lo[k] + (np.arange(len(k)) - np.repeat(np.cumsum(span) - span, span))
    n_slots = int(slot.max()) + 1
    present = np.unique(key * n_slots + slot[v])
    missing = ~np.isin(k * n_slots + s, present)
    k, s = k[missing], s[missing]
    # a placeholder of a missing cluster is inside its parents too: where a child cluster is missing
    # in the same layer as its parent, the child's placeholder stands for both
    cl = k // n_comp
    par_key = np.where(clusters.parent[cl] >= 0, clusters.parent[cl] * n_comp + k % n_comp, -1)
    code = k * n_slots + s
    child_codes = (par_key * n_slots + s)[par_key >= 0]
    keep = ~np.isin(code, child_codes)
    cl, s, c = cl[keep], s[keep], (k % n_comp)[keep]
    return s, c, _cluster_chains(clusters)[cl]


def _cluster_chains(clusters: Clusters) -> Array:
    """(clusters, depth): the chain of each cluster itself (its parents and it)."""
    depth = clusters.chain.shape[1]
    out = np.full((clusters.n, depth), -1, dtype=np.int64)
    for c in range(clusters.n):
        path = [c]
        p = clusters.parent[c]
        while p >= 0:
            path.append(int(p))
            p = clusters.parent[p]
        path.reverse()
        out[c, :len(path)] = path
    return out


def order_groups(chain: Array) -> list[Array]:
    """Per depth, the group of each vertex for ``order.Orderer``: its cluster at that depth, or a
    group of its own (ids past the clusters') where it is in no cluster that deep."""
    groups = []
    n_clusters = int(chain.max()) + 1 if chain.size else 0
    for d in range(chain.shape[1]):
        g = chain[:, d].copy()
        alone = g < 0
        g[alone] = n_clusters + np.flatnonzero(alone)
        groups.append(g)
    return groups


def spans(clusters: Clusters, slot: Array) -> tuple[Array, Array]:
    """First and last slot of each cluster (a cluster split over components spans both)."""
    v, d = np.nonzero(clusters.chain >= 0)
    c = clusters.chain[v, d]
    lo = np.full(clusters.n, np.iinfo(np.int64).max)
    hi = np.full(clusters.n, -1)
    np.minimum.at(lo, c, slot[v])
    np.maximum.at(hi, c, slot[v])
    return lo, hi


def alignable(clusters: Clusters, slot: Array, up: Array, low: Array) -> Array:
    """Which layered edges may join their ends into one straight vertical block: where the edge
    leaves a cluster, that cluster must end in the upper layer (and where it enters one, the cluster
    must begin in the lower layer); a block running through a cluster's border in the middle of
    its span would sit inside and outside the same rectangle."""
    chain = clusters.chain
    if clusters.n == 0:
        return np.ones(len(up), dtype=bool)
    lo, hi = spans(clusters, slot)
    a, b = chain[up], chain[low]
    differ = (a != b)
    ok = np.ones(len(up), dtype=bool)
    ca = np.where(differ & (a >= 0), a, -1)   # clusters the upper end leaves
    cb = np.where(differ & (b >= 0), b, -1)   # clusters the lower end enters
    s_up, s_low = slot[up][:, None], slot[low][:, None]
    ok &= ~((ca >= 0) & (hi[np.maximum(ca, 0)] >= s_low)).any(axis=1)
    ok &= ~((cb >= 0) & (lo[np.maximum(cb, 0)] <= s_up)).any(axis=1)
    return ok


@dataclass
class Constraints:
    """``x[j] >= x[i] + sep`` over variables: vertex blocks (their roots, ``0..nv-1``), then each
    cluster's left border (``nv + 2c``) and right border (``nv + 2c + 1``)."""

    i: Array
    j: Array
    sep: Array
    n_vars: int


def constraints(clusters: Clusters, slot: Array, rank: Array, extents: tuple[Array, Array], dummy: Array,
                root: Array, gap: float, pad: float, pad_step: float, cluster_gap: float,
                label_room: tuple[Array, Array] | None = None) -> Constraints:
    """The separation constraints of the x assignment (see the module docstring); ``extents``: each
    vertex's reach left and right of its centre (a box with side boxes beside it reaches further);
    ``label_room``: (room per cluster, which vertices an edge enters from above), see ``_label_room``."""
    nv = len(slot)
    chain = clusters.chain
    depth = chain.shape[1]
    lo_ext, hi_ext = extents
    seq = np.lexsort((rank, slot))
    same = slot[seq][1:] == slot[seq][:-1]
    a, b = seq[:-1][same], seq[1:][same]
    if depth:
        ca, cb = chain[a], chain[b]
        common = np.cumprod((ca == cb) & (ca >= 0), axis=1).sum(axis=1)   # depth of their common cluster
        k = np.minimum(common, depth - 1)
        rows = np.arange(len(a))
        left_c = np.where(common < depth, ca[rows, k], -1)
        right_c = np.where(common < depth, cb[rows, k], -1)
    else:
        left_c = right_c = np.full(len(a), -1, dtype=np.int64)
    # the item on each side: the child cluster of the common one holding the vertex, or the vertex
    li = np.where(left_c >= 0, nv + 2 * left_c + 1, root[a])
    rj = np.where(right_c >= 0, nv + 2 * right_c, root[b])
    lw = np.where(left_c >= 0, 0.0, hi_ext[a])
    rw = np.where(right_c >= 0, 0.0, lo_ext[b])
    plain = np.where(dummy[a] | dummy[b], gap / 2, gap)
    g = np.where((left_c >= 0) | (right_c >= 0), np.minimum(plain, cluster_gap), plain)
    parts_i, parts_j, parts_s = [li], [rj], [lw + rw + g]
    # neighbours in different clusters are also kept the plain gap apart, box to box
    across = (left_c >= 0) | (right_c >= 0)
    parts_i.append(root[a[across]])
    parts_j.append(root[b[across]])
    parts_s.append(hi_ext[a[across]] + lo_ext[b[across]] + plain[across])
    if clusters.n:
        margin = pad + pad_step * np.minimum(clusters.height, 2)
        inner = clusters.innermost
        v = np.flatnonzero(inner >= 0)
        c = inner[v]
        parts_i += [nv + 2 * c, root[v]]
        parts_j += [root[v], nv + 2 * c + 1]
        parts_s += [margin[c] + lo_ext[v], margin[c] + hi_ext[v]]
        child = np.flatnonzero(clusters.parent >= 0)
        p = clusters.parent[child]
        step = np.maximum(margin[p] - margin[child], pad_step)
        parts_i += [nv + 2 * p, nv + 2 * child + 1]
        parts_j += [nv + 2 * child, nv + 2 * p + 1]
        parts_s += [step, step]
        if label_room is not None:
            _label_room(clusters, slot, label_room, root, nv, parts_i, parts_j, parts_s)
    return Constraints(np.concatenate(parts_i), np.concatenate(parts_j), np.concatenate(parts_s),
                       nv + 2 * clusters.n)


def _label_room(clusters: Clusters, slot: Array, label_room: tuple[Array, Array], root: Array, nv: int,
                parts_i: list, parts_j: list, parts_s: list) -> None:
    """A frame's label sits at its top-left, above its first row: every vertex of that row that an
    edge enters from above keeps ``room`` right of the cluster's left border, so no edge runs down
    through the label (the renderer moves the frame's left side out to the label's width,
    ``render.parts.frames``, within that border)."""
    room, entered = label_room
    lo, _ = spans(clusters, slot)
    v, d = np.nonzero(clusters.chain >= 0)
    c = clusters.chain[v, d]
    on = entered[v] & (lo[c] == slot[v]) & (room[c] > 0)
    v, c = v[on], c[on]
    parts_i.append(nv + 2 * c)
    parts_j.append(root[v])
    parts_s.append(room[c])


def broken_frames(graph: nx.DiGraph, layout) -> list[str]:
    """Modules (of two boxes or more) whose frame cannot be a rectangle: a box of a node outside the
    module overlaps the bounding box of the module's boxes. The measure of issue #29."""
    members: dict[str, list] = {}
    for v, attrs in graph.nodes(data=True):
        path = node_cluster_path(attrs)
        parts = path.split(".") if path else []
        for k in range(1, len(parts) + 1):
            members.setdefault(".".join(parts[:k]), []).append(v)
    nodes = [v for v in graph.nodes if v in layout.pos]
    if not nodes:
        return []
    index = {v: i for i, v in enumerate(nodes)}
    xy = np.asarray([layout.pos[v] for v in nodes], dtype=float)
    wh = np.asarray([layout.size[v] for v in nodes], dtype=float)
    lo, hi = xy - wh / 2, xy + wh / 2
    broken = []
    for module, vs in members.items():
        ids = np.asarray([index[v] for v in vs if v in index], dtype=np.int64)
        if len(ids) < 2:
            continue
        b_lo, b_hi = lo[ids].min(axis=0), hi[ids].max(axis=0)
        inside = np.zeros(len(nodes), dtype=bool)
        inside[ids] = True
        hit = ~inside & (lo < b_hi - 1e-6).all(axis=1) & (hi > b_lo + 1e-6).all(axis=1)
        if hit.any():
            broken.append(module)
    return sorted(broken)
