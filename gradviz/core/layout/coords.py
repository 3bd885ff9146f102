"""x coordinates for the layered layout: straight vertical blocks + neighbour pulls.

1. *Alignment* (like Brandes-Koepf): each vertex is joined to at most one neighbour
   above and one below, giving vertical blocks (a long edge's dummies, the residual
   stream, a run of view/transpose ops).  A block always gets a single x, so those
   edges are perfectly straight.  Crossing pairs are dropped so blocks never swap
   sides, which keeps the block constraint graph acyclic.
2. *Pulls*: a few passes move every block toward the weighted mean x of its outside
   neighbours, then *compaction* restores the minimum gaps in every layer, pushing
   whole blocks (relaxation of "block A left of block B" constraints, vectorised).

All steps are whole-array numpy operations; no per-layer or per-vertex Python.

With module clusters (``clusters``), compaction works on general separation constraints that also
hold each cluster's two borders (``ConstraintCompactor``): every module is then one rectangle.
"""
from __future__ import annotations

import numpy as np

Array = np.ndarray


def edge_weights(n: int, up: Array, low: Array, nv: int) -> tuple[Array, Array]:
    """Pull weights (on the lower end, on the upper end) of each layered edge.

    Long-edge segments pull hard so they run straight (like dot: 1/2/8); a leaf such as
    a parameter barely pulls its consumer, so the data path stays straight and the leaf
    moves next to it instead.
    """
    is_dummy = np.arange(nv) >= n
    both, one = is_dummy[up] & is_dummy[low], is_dummy[up] | is_dummy[low]
    w = np.where(both, 8.0, np.where(one, 2.0, 1.0))
    degree = np.bincount(up, minlength=nv) + np.bincount(low, minlength=nv)
    leaf = ~is_dummy & (degree == 1)
    return np.where(leaf[up], 0.1 * w, w), np.where(leaf[low], 0.1 * w, w)


def _best(group: Array, keys: tuple[Array, ...], value: Array, nv: int) -> Array:
    """Per group id, the ``value`` of the entry that sorts last by ``keys``; else -1."""
    pick = np.full(nv, -1, dtype=np.int64)
    if len(group) == 0:
        return pick
    o = np.lexsort(keys + (group,))
    g = group[o]
    last = np.r_[g[1:] != g[:-1], True]
    pick[g[last]] = value[o][last]
    return pick


def alignment_blocks(slot: Array, rank: Array, up: Array, low: Array, w_low: Array,
                     w_up: Array, trunk: Array, reach: Array | None = None) -> Array:
    """Block root (topmost vertex) of every vertex.

    A vertex prefers the upper neighbour with the heaviest pull, then the one deepest in
    the graph (``trunk``: on the main data path rather than a parameter's stub); the
    upper vertex accepts the heaviest of those that chose it (then, with ``reach``, the one
    whose edge runs furthest: a residual stream stays straight and its branch steps aside).
    """
    nv = len(slot)
    pref_up = _best(low, (-np.abs(rank[up] - rank[low]), trunk[up], w_low), up, nv)
    wanted = pref_up[low] == up
    low_keys = (w_up[wanted],) if reach is None else (reach[low[wanted]], w_up[wanted])
    pref_low = _best(up[wanted], low_keys, low[wanted], nv)
    lower = np.flatnonzero(pref_up >= 0)
    lower = lower[pref_low[pref_up[lower]] == lower]
    upper = pref_up[lower]
    # drop pairs that cross an earlier kept one: in each layer gap, going left to right
    # along the lower layer, the upper ranks must increase
    o = np.lexsort((rank[lower], slot[lower]))
    lower, upper = lower[o], upper[o]
    s = slot[lower]
    r = rank[upper].astype(float) + s * (float(rank.max()) + 2)  # segment offsets
    prev_max = np.r_[-np.inf, np.maximum.accumulate(r)[:-1]]
    keep = r > prev_max
    root = np.arange(nv)
    root[lower[keep]] = upper[keep]
    while True:  # pointer jumping: log2(longest block) rounds
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


class BlockCompactor:
    """Maps desired block positions to the nearest-ish feasible ones.

    Consecutive vertices of a layer give constraints x[B] >= x[A] + sep between their
    blocks.  Pushing right (running max of constraints, iterated to a fixed point) and
    pushing left each give a feasible placement; their mean is feasible too (the
    constraints are linear) and moves crowded blocks symmetrically.
    """

    def __init__(self, slot: Array, rank: Array, width: Array, dummy: Array, root: Array,
                 gap: float, max_rounds: int = 400) -> None:
        seq = np.lexsort((rank, slot))
        same = slot[seq][1:] == slot[seq][:-1]
        a, b = seq[:-1][same], seq[1:][same]
        sep = (width[a] + width[b]) / 2 + np.where(dummy[a] | dummy[b], gap / 2, gap)
        self.a, self.b, self.sep = root[a], root[b], sep
        self.root = root
        self.max_rounds = max_rounds

    def _push(self, x: Array, right: bool) -> Array | None:
        x = x.copy()
        for _ in range(self.max_rounds):
            if right:
                cand = x[self.a] + self.sep
                bad = cand > x[self.b] + 1e-9
                if not bad.any():
                    return x
                np.maximum.at(x, self.b[bad], cand[bad])
            else:
                cand = x[self.b] - self.sep
                bad = cand < x[self.a] - 1e-9
                if not bad.any():
                    return x
                np.minimum.at(x, self.a[bad], cand[bad])
        return None  # did not settle (a very wide graph): caller falls back

    def __call__(self, block_x: Array) -> Array | None:
        """``block_x`` is indexed by root; returns x per vertex, or None if unsettled."""
        r = self._push(block_x, right=True)
        lft = None if r is None else self._push(block_x, right=False)
        if r is None or lft is None:
            return None
        return ((r + lft) / 2)[self.root]


class LayerCompactor:
    """Per-layer overlap removal (blocks ignored): always feasible, used as fallback.

    In layer-sorted order, subtracting cumulative minimum separations turns "no overlap"
    into "non-decreasing"; a segmented running max and a reversed running min are both
    feasible, and so is their mean.
    """

    def __init__(self, slot: Array, rank: Array, width: Array, dummy: Array, gap: float):
        self.seq = np.lexsort((rank, slot))
        s, w, d = slot[self.seq], width[self.seq], dummy[self.seq]
        sep = (w[:-1] + w[1:]) / 2 + np.where(d[:-1] | d[1:], gap / 2, gap)
        sep[s[1:] != s[:-1]] = 0.0
        within = np.concatenate([[0.0], np.cumsum(sep)])
        first = np.r_[True, s[1:] != s[:-1]]
        self.c = within - np.maximum.accumulate(np.where(first, within, -np.inf))
        self.slot = s.astype(float)

    def __call__(self, desired: Array) -> Array:
        t = desired[self.seq] - self.c
        k = 2.0 * (np.abs(t).max() + 1.0)  # slot offset larger than any value range
        off = self.slot * k
        right = np.maximum.accumulate(t + off) - off
        left = np.minimum.accumulate((t + off)[::-1])[::-1] - off
        x = np.empty_like(desired)
        x[self.seq] = (right + left) / 2 + self.c
        return x


class ConstraintCompactor:
    """Like ``BlockCompactor`` for constraints ``x[j] >= x[i] + sep`` over blocks and cluster borders.

    Pushing right starts the borders at -inf (they only move where something pushes them), pushing
    left at +inf; the mean of the two is feasible. When the vectorised relaxation does not settle in
    ``max_rounds`` (a very long chain of constraints), an exact pass in topological order finishes
    it; constraints with a cycle (only blocks can make one) give ``None``.
    """

    def __init__(self, cons, root: Array, max_rounds: int = 200) -> None:
        self.i, self.j, self.sep, self.n_vars = cons.i, cons.j, cons.sep, cons.n_vars
        self.root = root
        self.nv = len(root)
        self.max_rounds = max_rounds
        self._topo: list[int] | None = None

    def _push(self, x: Array, right: bool) -> Array | None:
        i, j, sep = self.i, self.j, self.sep
        for _ in range(self.max_rounds):
            if right:
                cand = x[i] + sep
                bad = cand > x[j] + 1e-9
                if not bad.any():
                    return x
                np.maximum.at(x, j[bad], cand[bad])
            else:
                cand = x[j] - sep
                bad = cand < x[i] - 1e-9
                if not bad.any():
                    return x
                np.minimum.at(x, i[bad], cand[bad])
        return self._exact(x, right)

    def topological(self) -> list[int] | None:
        """Variables in an order where every constraint goes forward; None on a cycle."""
        if self._topo is None:
            succ: list[list[int]] = [[] for _ in range(self.n_vars)]
            indeg = np.bincount(self.j, minlength=self.n_vars).tolist()
            for e, a in enumerate(self.i.tolist()):
                succ[a].append(e)
            jl = self.j.tolist()
            order = [v for v in range(self.n_vars) if indeg[v] == 0]
            for v in order:
                for e in succ[v]:
                    w = jl[e]
                    indeg[w] -= 1
                    if indeg[w] == 0:
                        order.append(w)
            self._topo = order if len(order) == self.n_vars else []
        return self._topo or None

    def _exact(self, x: Array, right: bool) -> Array | None:
        order = self.topological()
        if order is None:
            return None
        xs = x.tolist()
        il, jl, sl = self.i.tolist(), self.j.tolist(), self.sep.tolist()
        out: list[list[int]] = [[] for _ in range(self.n_vars)]
        inn: list[list[int]] = [[] for _ in range(self.n_vars)]
        for e in range(len(il)):
            (out if right else inn)[il[e] if right else jl[e]].append(e)
        if right:
            for v in order:
                for e in out[v]:
                    w = jl[e]
                    if xs[v] + sl[e] > xs[w]:
                        xs[w] = xs[v] + sl[e]
        else:
            for v in reversed(order):
                for e in inn[v]:
                    u = il[e]
                    if xs[v] - sl[e] < xs[u]:
                        xs[u] = xs[v] - sl[e]
        return np.asarray(xs)

    def __call__(self, block_x: Array) -> Array | None:
        """``block_x`` is indexed by root; returns x per vertex, or None (a cycle)."""
        start = np.empty(self.n_vars)
        start[:self.nv] = block_x
        start[self.nv:] = -np.inf
        r = self._push(start.copy(), right=True)
        if r is None:
            return None
        start[self.nv:] = np.inf
        lft = self._push(start, right=False)
        if lft is None:
            return None
        return ((r[:self.nv] + lft[:self.nv]) / 2)[self.root]


def assign_x(slot: Array, rank: Array, up: Array, low: Array, width: Array, n: int,
             trunk: Array, gap: float, passes: int, clustered=None) -> Array:
    """x centre of every vertex (real nodes 0..n-1, then dummies).

    ``clustered``: ``(Clusters, options, reach, stub, (left, right) extents, label room per cluster or
    None)`` to keep every cluster one rectangle (``_assign_clustered``)."""
    if clustered is not None:
        return _assign_clustered(slot, rank, up, low, width, n, trunk, gap, passes, *clustered)
    nv = len(slot)
    dummy = np.arange(nv) >= n
    w_low, w_up = edge_weights(n, up, low, nv)
    root = alignment_blocks(slot, rank, up, low, w_low, w_up, trunk)
    layer_compact = LayerCompactor(slot, rank, width, dummy, gap)
    block_compact = BlockCompactor(slot, rank, width, dummy, root, gap)
    x = layer_compact(np.zeros(nv))  # start: each layer centred on 0
    bx = np.bincount(root, x, minlength=nv) / np.maximum(np.bincount(root, minlength=nv), 1)
    x = block_compact(bx)
    if x is None:
        return _pull_passes(layer_compact(np.zeros(nv)), up, low, w_low, w_up,
                            np.arange(nv), layer_compact, passes)
    outside = root[up] != root[low]  # edges inside a block pull nothing
    return _pull_passes(x, up[outside], low[outside], w_low[outside], w_up[outside], root,
                        block_compact, passes, fallback=layer_compact)


def _pull_passes(x: Array, up: Array, low: Array, w_low: Array, w_up: Array, root: Array,
                 compact, passes: int, fallback: LayerCompactor | None = None,
                 settle: float | None = None) -> Array:
    """Move each block to the weighted mean x of its outside neighbours, then compact; with
    ``settle``, stop once no vertex moved that far in a pass."""
    nv = len(x)
    for _ in range(passes):
        num = np.bincount(root[low], w_low * x[up], minlength=nv)
        num += np.bincount(root[up], w_up * x[low], minlength=nv)
        den = np.bincount(root[low], w_low, minlength=nv)
        den += np.bincount(root[up], w_up, minlength=nv)
        bx = x.copy()  # indexed by root: a root's x is its block's x
        has = den > 0
        bx[has] = num[has] / den[has]
        new = compact(bx)
        if new is None:  # block constraints did not settle: per-layer from here on
            return fallback(bx[root]) if fallback is not None else x
        if settle is not None:   # converged (up to a shift of the whole drawing): stop
            moved = new - x
            if np.abs(moved - np.median(moved)).max() < settle:
                return new
        x = new
    return x


def _assign_clustered(slot: Array, rank: Array, up: Array, low: Array, width: Array, n: int,
                      trunk: Array, gap: float, passes: int, clusters, opts, reach, stub, extents,
                      room=None) -> Array:
    """``assign_x`` with cluster borders. Blocks join only edges that do not cross a cluster's border
    in the middle of its span (``clusters.alignable``); should the blocks still close a cycle of
    constraints, vertices go on alone (one-vertex blocks never do: every layer orders the clusters
    the same way)."""
    from gradviz.core.layout import clusters as cl

    nv = len(slot)
    dummy = np.arange(nv) >= n
    w_low, w_up = edge_weights(n, up, low, nv)
    # a parameter's branch (the weight and its transpose) barely pulls the op it feeds: the data
    # path keeps its straight block and the branch moves beside it, inside the module's frame
    w_low = np.where(stub[up] & ~stub[low], 0.1 * w_low, w_low)
    ok = cl.alignable(clusters, slot, up, low)
    root = alignment_blocks(slot, rank, up[ok], low[ok], w_low[ok], w_up[ok], trunk, reach)

    def compactor(root: Array) -> ConstraintCompactor:
        label_room = None if room is None else (room, np.bincount(low, minlength=nv) > 0)
        cons = cl.constraints(clusters, slot, rank, extents, dummy, root, gap, opts.cluster_pad,
                              opts.cluster_pad_step, opts.cluster_gap, label_room)
        return ConstraintCompactor(cons, root)

    compact = compactor(root)
    start = LayerCompactor(slot, rank, width, dummy, gap)(np.zeros(nv))
    bx = np.bincount(root, start, minlength=nv) / np.maximum(np.bincount(root, minlength=nv), 1)
    x = compact(bx)
    if x is None:
        root = np.arange(nv)
        compact = compactor(root)
        x = compact(start)
    outside = root[up] != root[low]
    return _pull_passes(x, up[outside], low[outside], w_low[outside], w_up[outside], root,
                        compact, passes, settle=0.5)
