"""Memory estimates of a training step, from the traced graph's structure alone.

What a user wants to know before training (and what a meta-device trace can tell
without allocating anything): the bytes of the parameters, of their gradients, and of
the activations autograd keeps for backward.

Activations are counted by *storage*: a tensor saved by several nodes (the output of
one op saved as the input of the next two) or a view of another (a transpose, a
reshape) keeps one block of memory alive, counted once, at the first node in forward
order that saves it. Parameters saved for backward are weights, not activations, and
are left out. Per node: ``saved_bytes`` (the bytes of the tensors it saved, shared or
not) and ``activation_bytes`` (the memory it is the first to keep alive).
"""
from __future__ import annotations

from typing import Iterable

import networkx as nx
from torch import nn


def account_saved(graph: nx.DiGraph, order: list[str], kept: dict[str, list[tuple]],
                  weights: Iterable[int]) -> None:
    """Fill ``saved_bytes``/``activation_bytes`` per op node and ``graph.graph['memory']['activations']``.

    ``kept``: node id -> ``(storage key or None, storage bytes, tensor bytes)`` per saved
    tensor (``walk.saved_tensors``); ``weights``: storage keys of the parameters.
    """
    seen = set(weights)
    total = 0
    count = 0
    for nid in order:
        entries = kept.get(nid)
        if entries is None:
            continue
        attrs = graph.nodes[nid]
        attrs["saved_bytes"] = sum(tb for _, _, tb in entries)
        new = 0
        for key, storage_bytes, tensor_bytes in entries:
            if key is None:            # no storage identity: count the tensor itself
                new += tensor_bytes
            elif key not in seen:
                seen.add(key)
                new += storage_bytes
        attrs["activation_bytes"] = new
        total += new
        count += len(entries)
    graph.graph.setdefault("memory", {}).update(activations=total, saved_tensors=count)


def account_model(graph: nx.DiGraph, model: nn.Module) -> None:
    """Parameter, gradient and buffer bytes, and the step's total (``graph.graph['memory']``).

    ``step`` = parameters + gradients + buffers + saved activations: the memory of one
    forward and backward before the optimizer adds its state (Adam: twice the parameters).
    """
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    mem = graph.graph.setdefault("memory", {})
    mem.update(params=params, grads=grads, buffers=buffers)
    mem["step"] = params + grads + buffers + mem.get("activations", 0)
