"""Tag a backward's autograd nodes with the loop iteration, and find an earlier iteration's nodes in a graph.

The tag lives in ``node.metadata`` (a dict torch keeps on the C++ node itself, public since 2.0), so it
holds no reference: a graph freed by its backward takes its tags with it, and a node that is still
reachable from a new graph -- a hidden state carried without ``detach()`` -- still carries the
iteration that made it. Walks are bounded (``MAX_NODES``): a graph that grows step over step (the
``retain_graph=True`` "fix" of a carried hidden state) is not walked to its end every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TAG = "gradviz_loop_iteration"
MAX_NODES = 20000
_LEAF = "AccumulateGrad"     # (by type name: ``hasattr(node, "variable")`` raises inside on every other node, ~5x slower)


@dataclass
class Walk:
    nodes: int = 0
    old: list[tuple[Any, Any, int]] = field(default_factory=list)   # (new consumer, old node, its iteration)
    truncated: bool = False


def tag_graph(root_fn: Any, iteration: int) -> Walk:
    """Tag every node reachable from ``root_fn`` that has no tag with ``iteration``; report the nodes
    tagged by an earlier iteration (not walked into: their graph was walked when it was made).

    The tag is also the walk's "seen" mark: the Python objects of a graph's nodes are made anew on each
    access on some torch releases (2.6), so neither ``id()`` nor identity can tell two visits apart."""
    walk = Walk()
    if root_fn is None:
        return walk
    stack = [(None, root_fn)]
    while stack:
        parent, fn = stack.pop()
        if type(fn).__name__ == _LEAF:
            continue          # a leaf's AccumulateGrad: shared by every step's graph, not part of one
        meta = fn.metadata
        tag = meta.get(TAG)
        if tag is not None:
            if tag < iteration and len(walk.old) < 8:
                walk.old.append((parent, fn, int(tag)))
            continue          # tagged earlier, or already in this walk
        meta[TAG] = iteration
        walk.nodes += 1
        if walk.nodes >= MAX_NODES:
            walk.truncated = True
            break
        for nxt, _ in fn.next_functions:
            if nxt is not None:
                stack.append((fn, nxt))
    return walk


def iteration_of(tensor: Any, near: int = 16) -> int | None:
    """The earliest iteration among the tagged nodes within ``near`` nodes of ``tensor``'s ``grad_fn``
    (None: none tagged, no graph). Nearby, not only its own node: an RNN's returned hidden state is made
    by a node the loss never reached (``h_n``'s stack), right above the nodes it did reach."""
    fn = getattr(tensor, "grad_fn", None)
    if fn is None:
        return None
    found, queue, visited = None, [fn], 0
    while queue and visited < near:
        node = queue.pop(0)
        visited += 1
        if type(node).__name__ == _LEAF:
            continue
        tag = node.metadata.get(TAG)
        if tag is not None:
            found = int(tag) if found is None else min(found, int(tag))
            continue
        queue.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
    return found
