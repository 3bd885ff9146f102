"""The module tree of a traced model, with each module's gradient norm."""
from __future__ import annotations

import math

import networkx as nx
from torch import nn

from gradviz.core.trace.comm_nodes import comm_modules
from gradviz.core.stats.sharding import type_name


def parent_of(path: str) -> str | None:
    """'a.b.c' -> 'a.b'; top-level modules have parent '' (the model); the model has None."""
    if path == "":
        return None
    return path.rpartition(".")[0]


def depth_of(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def prefixes(path: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b', 'a.b.c']."""
    if not path:
        return []
    parts = path.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def module_table(model: nn.Module, graph: nx.DiGraph) -> dict[str, dict]:
    """{path: {type, parent, depth, params, numel, param_bytes, activation_bytes, grad_norm, nodes}}
    for every module.

    ``grad_norm`` is the norm of all the module's parameter gradients (its
    submodules' included), None when none of them got a gradient; ``nodes`` counts
    graph nodes attributed to the module or below it; ``param_bytes`` the memory of its
    parameters and ``activation_bytes`` that of the activations its nodes keep for
    backward (``core/trace/memory.py``), submodules included.
    """
    table: dict[str, dict] = {}
    for path, module in model.named_modules():
        table[path] = {"type": type_name(module), "parent": parent_of(path), "depth": depth_of(path),
                       "params": [], "numel": 0, "param_bytes": 0, "activation_bytes": 0, "grad_sq": None,
                       "nodes": 0}
    chains: dict[str, list[dict]] = {}     # module path -> the table entries of it and its parents, once per path

    def chain(path: str) -> list[dict]:
        found = chains.get(path)
        if found is None:
            found = chains[path] = [table[p] for p in ("", *prefixes(path)) if p in table]
        return found

    nodes = graph.nodes
    for name, p in model.named_parameters():
        owner = name.rpartition(".")[0]
        if owner in table:
            table[owner]["params"].append(name)
        norm = nodes[f"param:{name}"].get("grad_norm") if f"param:{name}" in nodes else None
        numel, nbytes = p.numel(), p.numel() * p.element_size()
        for entry in chain(owner):
            entry["numel"] += numel
            entry["param_bytes"] += nbytes
            if norm is not None:
                entry["grad_sq"] = (entry["grad_sq"] or 0.0) + norm * norm
    for _, attrs in graph.nodes(data=True):
        held = attrs.get("activation_bytes") or 0
        for entry in chain(attrs.get("module", "")):
            entry["nodes"] += 1
            entry["activation_bytes"] += held
    for entry in table.values():
        sq = entry.pop("grad_sq")
        entry["grad_norm"] = math.sqrt(sq) if sq is not None else None
    table.update(comm_modules(graph))          # FSDP / DTensor communication boxes (core/trace/comm_nodes.py)
    return table


class ModuleNorms:
    """Per-module gradient norms of a graph, again and again from fresh node norms.

    ``module_table`` gives the traced values once; live training and recorded runs bring
    new node norms several times a second. The graph is read once here (which parameter
    and op node sits under which module paths), so ``compute(live)`` only adds numbers.
    A module's norm is that of its parameters' gradients (submodules included); a module
    without parameters gets the largest norm through its ops instead (``derived``).
    NaN and Inf propagate.
    """

    def __init__(self, table: dict[str, dict], graph: nx.DiGraph | None) -> None:
        self.table = table
        attrs = graph.nodes if graph is not None else {}
        self._params = [(f"param:{name}", ("", *prefixes(path))) for path, info in table.items()
                        for name in info.get("params", ())]
        self._traced = {nid: attrs[nid].get("grad_norm") for nid, _ in self._params if nid in attrs}
        self._ops = [(nid, a.get("grad_norm"), tuple(prefixes(a.get("module") or "")))
                     for nid, a in (graph.nodes(data=True) if graph is not None else ()) if a.get("kind") == "op"]
        self._bare = {path for path, info in table.items() if not info.get("numel")}

    def total(self, live: dict[str, float | None] | None = None) -> float | None:
        """The norm of all parameter gradients (the root module's)."""
        return self.compute(live, ops=False)[0].get("")

    def compute(self, live: dict[str, float | None] | None = None,
                ops: bool = True) -> tuple[dict[str, float | None], set[str]]:
        """``({path: norm or None}, derived paths)``; ``live`` node norms replace traced ones."""
        live = live or {}
        sq: dict[str, float] = {}
        for nid, paths in self._params:
            value = live[nid] if nid in live else self._traced.get(nid)
            if value is None:
                continue
            for path in paths:
                sq[path] = sq.get(path, 0.0) + value * value
        norms: dict[str, float | None] = {path: None for path in self.table}
        norms.update((path, math.sqrt(v)) for path, v in sq.items())
        derived: set[str] = set()
        if ops:
            through: dict[str, float] = {}
            for nid, traced, paths in self._ops:
                value = live[nid] if nid in live else traced
                if value is None:
                    continue
                for path in paths:
                    old = through.get(path)
                    if old is None or math.isnan(value) or (not math.isnan(old) and value > old):
                        through[path] = value
            for path in self._bare:
                if norms.get(path) is None and path in through:
                    norms[path] = through[path]
                    derived.add(path)
        return norms, derived
