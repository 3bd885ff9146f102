"""Which module an op belongs to when the forward was not watched (``gradviz.trace(loss, model=model)``).

A loss computed before gradviz was called carries no record of the modules its forward passed through:
only the parameters name modules (``transformer.h.0.mlp.c_fc.weight``). Every op is then placed in the
innermost module enclosing the nearest parameter-reading op before it and the nearest after it (nearest
by edges; several as near: the module enclosing them all): GELU between ``mlp.c_fc`` and ``mlp.c_proj`` is in ``mlp``; softmax between ``attn.c_attn`` and
``attn.c_proj`` is in ``attn``; the residual add between ``h.0.attn`` and ``h.0.ln_2`` is in ``h.0``. An op
that reads a parameter directly is in that parameter's module. So folding a graph traced from a loss
tensor groups it as a watched forward does (``gradviz.capture``), within what the parameters reveal.
"""
from __future__ import annotations

import networkx as nx

__all__ = ["place_ops_by_parameters"]


def _common(a: str | None, b: str | None) -> str | None:
    """The innermost module enclosing both (None: no information on that side)."""
    if a is None:
        return b
    if b is None:
        return a
    out = []
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        out.append(x)
    return ".".join(out)


def place_ops_by_parameters(g: nx.DiGraph, order: list[str], module_types: dict[str, str]) -> None:
    """Give each op without a module one from the parameters around it (``order``: producers first)."""
    nodes = g.nodes
    own: dict[str, str | None] = {}
    for nid in order:
        attrs = nodes[nid]
        if attrs.get("kind") != "op":
            continue
        owners = [nodes[p]["module"] for p in g.predecessors(nid) if nodes[p].get("kind") == "param"]
        found = None
        for owner in owners:
            found = owner if found is None else _common(found, owner)
        own[nid] = found
    # the nearest op with a module on the inputs' side (producers first) and on the loss's side: nearest,
    # not all of them — a residual stream reaches every later block, and would lift each add to the top
    up = _nearest(g, order, own, g.predecessors)
    down = _nearest(g, list(reversed(order)), own, g.successors)
    for nid, found in own.items():
        attrs = nodes[nid]
        if attrs.get("module"):
            continue
        if found is None:
            found = _common(up.get(nid), down.get(nid))
        if found:
            attrs.update(module=found, module_type=module_types.get(found, ""))


def _nearest(g: nx.DiGraph, order: list[str], own: dict[str, str | None], before) -> dict[str, str | None]:
    """For each op (in ``order``), the module of the nearest op with one among those ``before`` it."""
    best: dict[str, tuple[int, str | None]] = {}
    for nid in order:
        if nid not in own:
            continue
        if own[nid] is not None:
            best[nid] = (0, own[nid])
            continue
        found: tuple[int, str | None] = (1 << 30, None)
        for p in before(nid):
            if p not in best:
                continue
            dist, module = best[p]
            if module is None:
                continue
            if dist + 1 < found[0]:
                found = (dist + 1, module)
            elif dist + 1 == found[0]:
                found = (found[0], _common(found[1], module))
        best[nid] = found
    return {nid: module for nid, (_, module) in best.items()}
