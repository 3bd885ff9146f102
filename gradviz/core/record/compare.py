"""Compare two steps of a run, or two runs (before and after a fix): which gradients changed.

A side is a run file and a step (``run.gvrun@120``; the last step when none is given).
Per parameter the gradient norms of the two steps' rows are compared; per node of the
autograd graph the node norms of the nearest sampled step at or before each step. A
ratio is ``norm_b / norm_a``; the size of a change is ``|log10 ratio|``, and a gradient
that appears, vanishes or turns NaN/Inf outranks any finite ratio (a vanished gradient
is the bug a fix is meant to cure).

Nodes are matched by id when both graphs have the same structure (same hash). Across
different structures (a fix changed the model) ids mean nothing, so nodes are matched by
module, op and occurrence (the k-th ``addmm`` of ``encoder.0`` in data-flow order) and
parameters by name; ``matched_by`` says which. ``ratio_graph`` gives side B's graph
with ``grad_norm_a``, ``grad_norm_b`` and ``norm_ratio`` on each node, for a view coloured
by the ratio.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable

import networkx as nx
import numpy as np

from gradviz.core.record.reader import RunReader, open_ranks
from gradviz.core.record.schema import RecordError

APPEARED, VANISHED, NONFINITE = "appeared", "vanished", "nonfinite"
_RANK = {VANISHED: 0, NONFINITE: 1, APPEARED: 2}      # these first, then by |log10 ratio|


@dataclass
class Side:
    path: str
    step: int                          # the step compared (a row of the run)
    node_step: int | None              # the sampled step whose node norms are used
    loss: float | None
    grad_norm: float | None
    graph_hash: str = ""
    ranks: int = 1
    params: dict[str, float | None] = field(default_factory=dict)
    nodes: dict[str, float | None] = field(default_factory=dict)
    graph: nx.DiGraph | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "step": self.step, "node_step": self.node_step, "loss": self.loss,
                "grad_norm": self.grad_norm, "graph_hash": self.graph_hash, "ranks": self.ranks}


@dataclass
class Change:
    """One parameter or node: its norms on both sides and what happened."""

    name: str                          # parameter name or node id (side B's id for nodes)
    a: float | None
    b: float | None
    label: str = ""
    module: str = ""
    id_a: str = ""

    @property
    def ratio(self) -> float | None:
        if self.a is None or self.b is None or not (math.isfinite(self.a) and math.isfinite(self.b)):
            return None
        if self.a == 0:
            return math.inf if self.b > 0 else 1.0
        return self.b / self.a

    @property
    def change(self) -> str:
        """'vanished', 'appeared', 'nonfinite', 'same' or 'up'/'down'."""
        if self.a is not None and self.b is None:
            return VANISHED
        if self.a is None and self.b is not None:
            return APPEARED if math.isfinite(self.b) else NONFINITE
        if self.b is not None and not math.isfinite(self.b):
            return NONFINITE
        r = self.ratio
        if r is None or r == 1.0:
            return "same"
        return "up" if r > 1 else "down"

    @property
    def size(self) -> float:
        r = self.ratio
        if r is None or r == 0 or math.isinf(r):
            return math.inf if self.change != "same" else 0.0
        return abs(math.log10(r))

    def sort_key(self) -> tuple:
        return (_RANK.get(self.change, 3), -self.size, self.name)

    def to_dict(self) -> dict:
        d = {"name": self.name, "a": self.a, "b": self.b, "ratio": self.ratio, "change": self.change}
        if self.label or self.module:
            d.update(label=self.label, module=self.module, id_a=self.id_a)
        return d


@dataclass
class Comparison:
    a: Side
    b: Side
    params: list[Change]
    nodes: list[Change]
    matched_by: str                    # 'id' | 'structure' | 'none' (no node norms on a side)
    unmatched_a: int = 0
    unmatched_b: int = 0

    def to_dict(self, top: int | None = None) -> dict:
        from gradviz.core.runtime.formatting import json_safe

        return json_safe({"a": self.a.to_dict(), "b": self.b.to_dict(), "matched_by": self.matched_by,
                          "unmatched_nodes": {"a": self.unmatched_a, "b": self.unmatched_b},
                          "params": [c.to_dict() for c in self.params[:top]],
                          "nodes": [c.to_dict() for c in self.nodes[:top]]})


FIRST = "first"


def parse_side(text: str | os.PathLike) -> tuple[str, int | str | None]:
    """``run.gvrun@120`` -> (path, 120); ``run.gvrun`` or ``@last`` -> (path, None); ``@first`` ->
    (path, "first"), the run's first step. A path that exists wins."""
    text = os.fspath(text)
    if os.path.exists(text) or "@" not in text:
        return text, None
    path, _, step = text.rpartition("@")
    if step in ("last", FIRST):
        return path, None if step == "last" else FIRST
    try:
        return path, int(step)
    except ValueError:
        raise RecordError(f"'{step}' after @ is not a step number (use RUN@STEP, RUN@first or RUN@last)",
                          path) from None


def load_side(path: str, step: int | str | None) -> Side:
    readers = open_ranks(path)
    try:
        return _side(readers[0], step, len(readers))
    finally:
        for r in readers:
            r.close()


def _side(reader: RunReader, step: int | str | None, ranks: int) -> Side:
    steps = reader.steps()
    if not len(steps["step"]):
        raise RecordError("the run has no steps yet", reader.path)
    if step == FIRST:
        i = 0
    elif step is None:
        i = len(steps["step"]) - 1
    else:
        at = np.flatnonzero(steps["step"] <= step)
        if not len(at):
            raise RecordError(f"no step at or before {step} (the run starts at step {int(steps['step'][0])})",
                              reader.path)
        i = int(at[-1])
    s = int(steps["step"][i])
    params = {name: (float(v) if has else None)
              for name, v, has in zip(reader.param_names, steps["grad_norms"][i], steps["has_grad"][i])}
    side = Side(str(reader.path), s, None, _num(steps["loss"][i]), _num(steps["grad_norm"][i]), ranks=ranks,
                params=params)
    got = reader.node_norms(s)
    if got is not None and got[0] <= s:
        side.node_step, side.nodes = got
        side.graph = reader.graph_at(got[0])
        side.graph_hash = _graph_hash(reader, got[0])
    return side


def _graph_hash(reader: RunReader, step: int) -> str:
    ids = reader.graph_ids()
    current = [h for gid, first, h in ids if first <= step]
    return current[-1] if current else ""


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def compare(a: str | Side, b: str | Side, *, step_a: int | None = None, step_b: int | None = None) -> Comparison:
    """Compare side A with side B (paths, optionally ``path@step``, or loaded ``Side`` objects)."""
    if not isinstance(a, Side):
        path, step = parse_side(a) if step_a is None else (a, step_a)
        a = load_side(path, step)
    if not isinstance(b, Side):
        path, step = parse_side(b) if step_b is None else (b, step_b)
        b = load_side(path, step)
    params = [Change(n, a.params.get(n), b.params.get(n), label=n, module=n.rpartition(".")[0])
              for n in _union(a.params, b.params)]
    params = [c for c in params if not (c.a is None and c.b is None)]
    nodes, matched_by, un_a, un_b = _node_changes(a, b)
    return Comparison(a, b, sorted(params, key=Change.sort_key), sorted(nodes, key=Change.sort_key),
                      matched_by, un_a, un_b)


def _union(x: Iterable[str], y: Iterable[str]) -> list[str]:
    return list(dict.fromkeys([*x, *y]))


def _node_changes(a: Side, b: Side) -> tuple[list[Change], str, int, int]:
    if a.graph is None or b.graph is None:
        return [], "none", 0, 0
    if a.graph_hash and a.graph_hash == b.graph_hash:
        pairs = {nid: nid for nid in b.graph if nid in a.graph}
        matched_by = "id"
    else:
        ka, kb = structure_keys(a.graph), structure_keys(b.graph)
        by_key = {k: nid for nid, k in ka.items()}
        pairs = {nid: by_key[k] for nid, k in kb.items() if k in by_key}
        matched_by = "structure"
    out = []
    for nid_b, nid_a in pairs.items():
        attrs = b.graph.nodes[nid_b]
        if attrs.get("kind") == "loss":
            continue
        va, vb = a.graph.nodes[nid_a].get("grad_norm"), attrs.get("grad_norm")
        if va is None and vb is None:
            continue
        out.append(Change(nid_b, va, vb, label=str(attrs.get("label") or nid_b), module=attrs.get("module") or "",
                          id_a=nid_a))
    return out, matched_by, a.graph.number_of_nodes() - len(pairs), b.graph.number_of_nodes() - len(pairs)


def structure_keys(graph: nx.DiGraph) -> dict[str, tuple]:
    """A key per node that survives a change elsewhere in the model: parameters and inputs by
    name, the loss as such, ops as (module, label, k-th such op in data-flow order)."""
    keys: dict[str, tuple] = {}
    seen: dict[tuple, int] = {}
    # a collapsed view may have cycles between boxes: then the graph's own (deterministic) order
    order = nx.topological_sort(graph) if nx.is_directed_acyclic_graph(graph) else list(graph)
    for nid in order:
        attrs = graph.nodes[nid]
        kind = attrs.get("kind", "op")
        if kind == "param":
            keys[nid] = (kind, attrs.get("param") or str(nid))
            continue
        if kind in ("input", "loss"):
            keys[nid] = (kind, str(nid))
            continue
        base = (kind, attrs.get("module") or "", attrs.get("label") or "")
        k = seen.get(base, 0)
        seen[base] = k + 1
        keys[nid] = (*base, k)
    return keys


def ratio_graph(comparison: Comparison) -> nx.DiGraph | None:
    """Side B's graph with ``grad_norm_a``/``grad_norm_b``/``norm_ratio`` per matched node
    (None where a side has no value); parameters take the rows' norms."""
    if comparison.b.graph is None:
        return None
    g = comparison.b.graph.copy()
    for attrs in g.nodes.values():
        attrs.update(grad_norm_a=None, grad_norm_b=attrs.get("grad_norm"), norm_ratio=None)
    for c in comparison.nodes:
        if c.name in g:
            g.nodes[c.name].update(grad_norm_a=c.a, grad_norm_b=c.b, norm_ratio=c.ratio, norm_change=c.change)
    for c in comparison.params:
        nid = f"param:{c.name}"
        if nid in g:
            g.nodes[nid].update(grad_norm_a=c.a, grad_norm_b=c.b, norm_ratio=c.ratio, norm_change=c.change)
    g.graph.update(compare={"a": comparison.a.to_dict(), "b": comparison.b.to_dict(),
                            "matched_by": comparison.matched_by})
    return g
