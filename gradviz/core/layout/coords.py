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
                     w_up: Array, trunk: Array) -> Array:
    """Block root (topmost vertex) of every vertex.

    A vertex prefers the upper neighbour with the heaviest pull, then the one deepest in
    the graph (``trunk``: on the main data path rather than a parameter's stub); the
    upper vertex accepts the heaviest of those that chose it.
    """
    nv = len(slot)
    pref_up = _best(low, (-np.abs(rank[up] - rank[low]), trunk[up], w_low), up, nv)
    wanted = pref_up[low] == up
    pref_low = _best(up[wanted], (w_up[wanted],), low[wanted], nv)
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


def assign_x(slot: Array, rank: Array, up: Array, low: Array, width: Array, n: int,
             trunk: Array, gap: float, passes: int) -> Array:
    """x centre of every vertex (real nodes 0..n-1, then dummies)."""
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
                 compact, passes: int, fallback: LayerCompactor | None = None) -> Array:
    """Move each block to the weighted mean x of its outside neighbours, then compact."""
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
        x = new
    return x
