"""The module tree of a traced model, with each module's gradient norm."""
from __future__ import annotations

import math

import networkx as nx
from torch import nn


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
    """{path: {type, parent, depth, params, numel, grad_norm, nodes}} for every module.

    ``grad_norm`` is the norm of all the module's parameter gradients (its
    submodules' included), None when none of them got a gradient; ``nodes`` counts
    graph nodes attributed to the module or below it.
    """
    table: dict[str, dict] = {}
    for path, module in model.named_modules():
        table[path] = {"type": type(module).__name__, "parent": parent_of(path), "depth": depth_of(path),
                       "params": [], "numel": 0, "grad_sq": None, "nodes": 0}
    for name, p in model.named_parameters():
        owner = name.rpartition(".")[0]
        if owner in table:
            table[owner]["params"].append(name)
        attrs = graph.nodes.get(f"param:{name}", {})
        norm = attrs.get("grad_norm")
        for path in ["", *prefixes(owner)]:
            if path in table:
                table[path]["numel"] += p.numel()
                if norm is not None:
                    table[path]["grad_sq"] = (table[path]["grad_sq"] or 0.0) + norm * norm
    for _, attrs in graph.nodes(data=True):
        for path in ["", *prefixes(attrs.get("module", ""))]:
            if path in table:
                table[path]["nodes"] += 1
    for entry in table.values():
        sq = entry.pop("grad_sq")
        entry["grad_norm"] = math.sqrt(sq) if sq is not None else None
    return table


def module_grad_norms(table: dict[str, dict], norms: dict[str, float | None]) -> dict[str, float]:
    """``module_table``'s ``grad_norm`` again from fresh parameter norms (``{"param:<name>":
    norm}``, e.g. a training step or a recorded one): the norm of each module's parameter
    gradients, its submodules' included. Modules none of whose parameters has a norm are
    absent; NaN and Inf propagate."""
    sq: dict[str, float] = {}
    for path, info in table.items():
        for name in info.get("params", ()):
            value = norms.get(f"param:{name}")
            if value is None:
                continue
            for prefix in ["", *prefixes(path)]:
                sq[prefix] = sq.get(prefix, 0.0) + value * value
    return {path: math.sqrt(v) for path, v in sq.items()}
