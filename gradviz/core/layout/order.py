"""Crossing reduction for the layered layout: vectorised barycenter sweeps.

Vertices (real nodes and dummies) are integers ``0..nv-1``; ``slot[v]`` is the layer
``v`` sits in (layers of different components are different slots, so they never
interact).  ``up``/``low`` are the layered edges: ``slot[low] == slot[up] + 1``.

A classic sweep reorders one layer at a time, which costs a few numpy calls *per layer*;
GPT graphs have thousands of thin layers, so that overhead would dominate.  Instead each
step reorders every layer of one parity at once (red-black Gauss-Seidel): odd layers
from their (fixed) even neighbours, then even layers from odd ones.  Information still
travels two layers per step, and a step is a handful of whole-array calls.

Module clusters stay contiguous because the sort key is hierarchical:
(slot, mean barycenter of the depth-1 module group, its id, depth-2 group mean, id, ...,
own barycenter, current rank).
"""
from __future__ import annotations

import numpy as np

Array = np.ndarray


def slot_ranks(slot: Array, order: Array) -> Array:
    """Rank of each vertex within its slot, given a global ``order`` sorted by slot."""
    n_slots = int(slot.max()) + 1 if len(slot) else 0
    start = np.zeros(n_slots + 1, dtype=np.int64)
    np.cumsum(np.bincount(slot, minlength=n_slots), out=start[1:])
    rank = np.empty(len(slot), dtype=np.int64)
    rank[order] = np.arange(len(order)) - start[slot[order]]
    return rank


def count_crossings(slot: Array, rank: Array, up: Array, low: Array) -> int:
    """Number of edge crossings between adjacent layers (vectorised merge-sort count).

    Two edges between the same pair of layers cross iff their upper ends and lower ends
    are in opposite order.  Sorting edges by (slot, upper rank, lower rank) turns this into
    counting inversions of ``slot * W + lower rank``; different slots never invert.
    """
    if len(up) < 2:
        return 0
    width = int(rank.max()) + 1
    srt = np.lexsort((rank[low], rank[up], slot[up]))
    seq = (slot[up] * width + rank[low])[srt]
    return _inversions(seq)


def _inversions(seq: Array) -> int:
    """Count pairs i < j with seq[i] > seq[j], bottom-up merge sort on whole arrays."""
    _, seq = np.unique(seq, return_inverse=True)  # compress values to 0..k-1
    seq = seq.astype(np.int64).ravel()
    n = len(seq)
    size = 1 << max(1, (n - 1).bit_length())
    big = int(seq.max()) + 1
    arr = np.full(size, big, dtype=np.int64)  # padding sorts last: no extra inversions
    arr[:n] = seq
    total = 0
    block = 1
    pos = np.arange(size)
    while block < size:
        pair = pos // (2 * block)  # which pair of blocks each element belongs to
        is_right = (pos // block) % 2 == 1
        keys = pair * (big + 1) + arr  # each block is sorted; keys sorted per left block
        left_keys = keys[~is_right]
        right_keys = keys[is_right]
        # left elements <= r, counted inside r's own left block via a global search
        le = np.searchsorted(left_keys, right_keys, side="right") - pair[is_right] * block
        total += int((block - le).sum())
        arr = np.sort(keys, kind="stable") - pair * (big + 1)
        block *= 2
    return total


def module_groups(vertex_module: Array, modules: list[str], max_depth: int = 6) -> list[Array]:
    """Per depth d >= 1, a group id for each vertex: its module's first d path parts.

    Vertices whose module is shallower than d get a group of their own (a negative id), so
    they are ordered among the depth-d groups as individuals.
    """
    depth = max((m.count(".") + 1 for m in modules if m), default=0)
    groups = []
    for d in range(1, min(depth, max_depth) + 1):
        ids: dict[str, int] = {}
        per_module = np.full(len(modules), -1, dtype=np.int64)
        for i, m in enumerate(modules):
            parts = m.split(".") if m else []
            if len(parts) >= d:
                per_module[i] = ids.setdefault(".".join(parts[:d]), len(ids))
        g = per_module[vertex_module]
        alone = g < 0
        g[alone] = len(ids) + np.flatnonzero(alone)  # unique singleton ids
        groups.append(g)
    return groups


class Orderer:
    """Holds the static structure; ``run`` returns ranks within slots."""

    def __init__(self, slot: Array, up: Array, low: Array, groups: list[Array],
                 clustered: bool = False) -> None:
        """``clustered``: the groups are clusters (``clusters.order_groups``), ordered by one key over
        all their layers, so a cluster left of another in one layer is left of it in every layer
        (its frame can then be one rectangle); otherwise each layer orders its groups by itself."""
        self.slot, self.up, self.low = slot, up, low
        self.clustered = clustered
        nv = len(slot)
        self.nv = nv
        self.n_slots = int(slot.max()) + 1 if nv else 0
        self.slot_size = np.bincount(slot, minlength=self.n_slots)
        self.parity = slot % 2  # slot ids are consecutive layers within a component
        self.deg_up = np.bincount(low, minlength=nv)  # neighbours above
        self.deg_low = np.bincount(up, minlength=nv)  # neighbours below
        # vertices that can move at all: those in layers of 2+
        self.movable = self.slot_size[slot] > 1
        # compact (slot, group) ids per depth for group means
        self.slot_groups = []
        for g in groups:
            key = g if clustered else slot.astype(np.int64) * (int(g.max()) + 1) + g
            _, sg = np.unique(key, return_inverse=True)
            sg = sg.ravel()
            self.slot_groups.append((sg, np.bincount(sg).astype(float)))

    def _npos(self, rank: Array) -> Array:
        """Position normalised to (0, 1) so layers of different widths compare."""
        return (rank + 0.5) / self.slot_size[self.slot]

    def _barycenters(self, npos: Array, use_up: bool, use_low: bool) -> Array:
        num = np.zeros(self.nv)
        den = np.zeros(self.nv)
        if use_up:
            num += np.bincount(self.low, npos[self.up], minlength=self.nv)
            den += self.deg_up
        if use_low:
            num += np.bincount(self.up, npos[self.low], minlength=self.nv)
            den += self.deg_low
        bary = npos.copy()  # no neighbours on that side: stay put
        has = den > 0
        bary[has] = num[has] / den[has]
        return bary

    def _reorder(self, rank: Array, bary: Array, active: Array) -> Array:
        """Sort the vertices of active slots (whole layers) by the hierarchical key."""
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            return rank
        keys = [rank[idx], bary[idx]]
        for sg, count in reversed(self.slot_groups):
            if self.clustered:   # a cluster's key is the mean over all its layers, moving or not
                gmean = np.bincount(sg, bary, minlength=len(count)) / count
            else:
                gmean = np.bincount(sg[idx], bary[idx], minlength=len(count)) / count
            keys += [sg[idx], gmean[sg[idx]]]
        slot = self.slot[idx]
        keys.append(slot)
        srt = np.lexsort(keys)
        # rank = index in sorted order minus the index where the vertex's slot begins
        pos = np.arange(len(idx))
        first = np.r_[True, slot[srt][1:] != slot[srt][:-1]]
        start = np.maximum.accumulate(np.where(first, pos, 0))
        new = rank.copy()
        new[idx[srt]] = pos - start
        return new

    def consistent(self, rank: Array) -> Array:
        """Every layer re-sorted by the clusters' keys from the current positions: the red-black steps
        move odd and even layers apart, so two sibling clusters could swap between them."""
        return self._reorder(rank, self._npos(rank), self.movable)

    def run(self, rank: Array, sweeps: int) -> Array:
        """Alternate down/up sweeps of red-black steps; keep the order with fewest crossings."""
        if self.nv == 0 or not self.movable.any():
            return rank
        if self.clustered:
            rank = self.consistent(rank)
        best, best_cross = rank, count_crossings(self.slot, rank, self.up, self.low)
        steps = max(2, int(self.n_slots ** 0.5) // 4)  # taller graphs need more steps
        steps = min(steps, 12)
        for sweep in range(sweeps):
            down = sweep % 2 == 0
            for step in range(steps):
                for par in ((1, 0) if down else (0, 1)):
                    active = self.movable & (self.parity == par)
                    use_up, use_low = (down, not down) if step < steps - 1 else (True, True)
                    bary = self._barycenters(self._npos(rank), use_up, use_low)
                    rank = self._reorder(rank, bary, active)
            if self.clustered:
                rank = self.consistent(rank)
            cross = count_crossings(self.slot, rank, self.up, self.low)
            if cross < best_cross:
                best, best_cross = rank, cross
            if best_cross == 0:
                break
        return best
