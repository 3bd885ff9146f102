"""Layers in which every module is one band: a module starts below every module it reads from.

Longest-path layering alone lets a module's first node (a parameter pulled down above its op) share
a layer with the last node of the module before it; the two frames then have to sit side by side,
and a stack of blocks turns into a staircase. Here the layering runs on an augmented DAG: each
cluster C gets a top and a bottom vertex (top_C <= every node of C <= bottom_C), and an edge that
leaves cluster X and enters its sibling Y becomes bottom_X + 1 <= top_Y. A module used twice along
a path (one ReLU module applied after two layers, a model left for a ``.detach()`` and entered
again) makes those constraints cyclic; inside each strongly connected part the constraints of the
outermost modules on the cycle fall back to the plain edges (repeated until no cycle is left), so
such a module spans its uses and what lies between sits beside it.

Why siblings may not share a layer (measured, 2 Dec, by dropping the sibling constraints and keeping
everything else): two rectangles that share any layer must sit side by side over their whole height,
so a module whose parameter row shares the last layer of the module before it lands entirely beside
it, and a chain of modules becomes a sideways staircase. The digits MLP came back to 10 layers but
595 px wide instead of 364; the 11.6k-node GPT stack became 376,055 px wide (each block beside the
previous one), 6.5x slower to lay out, with 1.67x the edge length; on the samples edge length rose to
1.57x on average (3.18x on ResNet). One extra layer per module is the cheaper price.

Then, as in ``layered``, nodes with at least as many out- as in-edges move down to just above their
first successor, but never below the bottom of their own cluster when that successor is outside it.
Python loops are O(nodes + edges + clusters).
"""
from __future__ import annotations

import numpy as np

from gradviz.core.layout.clusters import Clusters, edge_items

Array = np.ndarray


def _graph(n: int, clusters: Clusters, src: Array, dst: Array, plain: Array):
    """Edge lists (tail, head, weight) of the augmented DAG; ``plain`` marks graph edges that stay
    node to node."""
    nc = clusters.n
    top = n + 2 * np.arange(nc)
    bot = top + 1
    left, right = edge_items(clusters.chain, src, dst)
    left = np.where(plain, -1, left)
    right = np.where(plain, -1, right)
    tail = np.where(left >= 0, bot[np.maximum(left, 0)] if nc else 0, src)
    head = np.where(right >= 0, top[np.maximum(right, 0)] if nc else 0, dst)
    cluster_edge = (left >= 0) | (right >= 0)
    inner = clusters.innermost
    v = np.flatnonzero(inner >= 0)
    child = np.flatnonzero(clusters.parent >= 0) if nc else np.zeros(0, dtype=np.int64)
    p = clusters.parent[child] if nc else child
    tails = np.concatenate([tail, top[inner[v]], v, top[p], bot[child]])
    heads = np.concatenate([head, v, bot[inner[v]], top[child], bot[p]])
    weights = np.concatenate([np.ones(len(src), dtype=np.int64), np.zeros(2 * len(v) + 2 * len(child), dtype=np.int64)])
    return tails, heads, weights, cluster_edge


def _longest(n_vars: int, tails: Array, heads: Array, weights: Array) -> list[int] | None:
    """Longest-path level of every variable (Kahn); None when the graph has a cycle."""
    succ: list[list[int]] = [[] for _ in range(n_vars)]
    for e, t in enumerate(tails.tolist()):
        succ[t].append(e)
    hl, wl = heads.tolist(), weights.tolist()
    indeg = np.bincount(heads, minlength=n_vars).tolist()
    level = [0] * n_vars
    queue = [v for v in range(n_vars) if indeg[v] == 0]
    for v in queue:
        lv = level[v]
        for e in succ[v]:
            w = hl[e]
            if lv + wl[e] > level[w]:
                level[w] = lv + wl[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                queue.append(w)
    return level if len(queue) == n_vars else None


def _scc(n_vars: int, tails: Array, heads: Array) -> Array:
    """Strongly connected component of every variable (iterative Tarjan)."""
    succ: list[list[int]] = [[] for _ in range(n_vars)]
    for t, h in zip(tails.tolist(), heads.tolist()):
        succ[t].append(h)
    index = [-1] * n_vars
    low = [0] * n_vars
    on = [False] * n_vars
    comp = [-1] * n_vars
    stack: list[int] = []
    counter = 0
    n_comp = 0
    for s in range(n_vars):
        if index[s] >= 0:
            continue
        work = [(s, 0)]
        index[s] = low[s] = counter
        counter += 1
        stack.append(s)
        on[s] = True
        while work:
            v, i = work[-1]
            if i < len(succ[v]):
                work[-1] = (v, i + 1)
                w = succ[v][i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, 0))
                elif on[w]:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    while True:
                        w = stack.pop()
                        on[w] = False
                        comp[w] = n_comp
                        if w == v:
                            break
                    n_comp += 1
    return np.asarray(comp, dtype=np.int64)


def banded_layers(n: int, src: Array, dst: Array, clusters: Clusters,
                  pull_down: bool) -> tuple[Array, Array]:
    """(longest-path layers, final layers) of the ``n`` nodes, edges ``src -> dst`` (a DAG)."""
    n_vars = n + 2 * clusters.n
    plain = np.zeros(len(src), dtype=bool)
    left, right = edge_items(clusters.chain, src, dst)
    depth = _chains_depth(clusters) if clusters.n else np.zeros(0, dtype=np.int64)
    item = np.maximum(left, right)
    edge_depth = np.where(item >= 0, depth[np.maximum(item, 0)] if clusters.n else 0, 0)
    m = len(src)
    while True:
        tails, heads, weights, cluster_edge = _graph(n, clusters, src, dst, plain)
        level = _longest(n_vars, tails, heads, weights)
        if level is not None:
            break
        # a module left and entered again (a .detach() between two stages of one model): inside each
        # cycle the constraints of the outermost modules on it go back to plain edges, deeper ones stay
        comp = _scc(n_vars, tails, heads)
        cyclic = cluster_edge & ~plain & (comp[tails[:m]] == comp[heads[:m]])
        shallowest = edge_depth[cyclic].min()
        plain |= cyclic & (edge_depth == shallowest)
    longest = np.asarray(level[:n], dtype=np.int64)
    if not pull_down:
        return longest, longest.copy()
    layer = list(level[:n])
    bottom = level[n + 1::2] if clusters.n else []
    inner = clusters.innermost
    leaves = np.zeros(n, dtype=bool)   # has a successor outside its innermost cluster
    if clusters.n and len(src):
        depth_of = (_chains_depth(clusters) - 1)
        c = inner[src]
        d = depth_of[np.maximum(c, 0)]
        outside = (c >= 0) & (clusters.chain[dst, d] != c)
        leaves = np.bincount(src, weights=outside, minlength=n) > 0
    preds = np.bincount(dst, minlength=n).tolist()
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        succs[u].append(v)
    inner_l, leaves_l = inner.tolist(), leaves.tolist()
    order = np.argsort(-longest, kind="stable").tolist()   # sinks first
    for v in order:
        ss = succs[v]
        if not ss or preds[v] > len(ss):
            continue
        target = min(layer[s] for s in ss) - 1
        if leaves_l[v]:
            target = min(target, bottom[inner_l[v]])
        if target > layer[v]:
            layer[v] = target
    return longest, np.asarray(layer, dtype=np.int64)


def _chains_depth(clusters: Clusters) -> Array:
    """Depth (1 = top level) of every cluster."""
    depth = np.ones(clusters.n, dtype=np.int64)
    p = clusters.parent.copy()
    while (p >= 0).any():
        depth += p >= 0
        p = np.where(p >= 0, clusters.parent[np.maximum(p, 0)], -1)
    return depth
