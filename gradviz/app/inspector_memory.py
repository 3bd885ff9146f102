"""The inspector's structure rows: memory estimates (``core/trace/memory.py``), fold boxes'
repeats, and what a graph without values (a meta-device trace) cannot show."""
from __future__ import annotations

import math

from gradviz.core.runtime.formatting import byte_size, number

META_TEXT = "structure only (meta device): no values"

_ITEMSIZE = {"float64": 8, "double": 8, "int64": 8, "long": 8, "complex64": 8, "complex128": 16,
             "float32": 4, "float": 4, "int32": 4, "int": 4, "float16": 2, "half": 2, "bfloat16": 2,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def tensor_bytes(shape, dtype: str) -> int | None:
    """Bytes of a tensor of ``shape`` and ``dtype`` (its name), None when unknown."""
    size = _ITEMSIZE.get(str(dtype))
    if size is None or shape is None:
        return None
    return math.prod(int(d) for d in shape) * size


def node_rows(attrs: dict) -> list[tuple[str, str]]:
    """Memory of one node: what it saved for backward, or a parameter's bytes."""
    kind = attrs.get("kind")
    rows = []
    if kind == "op" and attrs.get("saved_bytes") is not None:
        rows.append(("saved for backward", byte_size(attrs["saved_bytes"])))
        new = attrs.get("activation_bytes")
        if new is not None and new != attrs["saved_bytes"]:
            rows.append(("new memory kept", byte_size(new) + "  (not already kept by an earlier node)"))
    elif kind == "param":
        size = tensor_bytes(attrs.get("shape"), attrs.get("dtype", ""))
        if size is not None:
            grads = " + the same for its gradient" if attrs.get("requires_grad", True) else ""
            rows.append(("memory", byte_size(size) + grads))
    return rows


def group_rows(attrs: dict) -> list[tuple[str, str]]:
    """A module box or fold: parameters and the activations its nodes keep for backward."""
    rows = []
    if attrs.get("numel") is not None:
        rows.append(("parameters", f"{number(attrs['numel'], grouped=True)}  ({byte_size(attrs.get('param_bytes'))})"))
    if attrs.get("activation_bytes") is not None:
        rows.append(("activations", byte_size(attrs["activation_bytes"]) + " kept for backward"))
    return rows


def fold_rows(attrs: dict) -> list[tuple[str, str]]:
    """Which repeats a fold box stands for, and how their gradient norms run."""
    repeats = attrs.get("repeats") or []
    rows = [("repeats", f"{len(repeats)} × {attrs.get('module_type', '')}: {attrs.get('first')} … {attrs.get('last')}")]
    if attrs.get("run_size") and attrs["run_size"] != len(repeats):
        rows.append(("run", f"{len(repeats)} of {attrs['run_size']} repeats (the others are drawn on their own)"))
    norms = attrs.get("repeat_norms") or []
    known = [(v, i) for i, v in enumerate(norms) if v is not None and math.isfinite(v)]
    if known:
        lo, hi = min(known), max(known)
        rows.append(("norm per repeat", f"{number(lo[0])} ({repeats[lo[1]]}) … {number(hi[0])} ({repeats[hi[1]]})"))
        rows.append(("first → last", f"{number(known[0][0])} → {number(known[-1][0])}"))
    elif norms:
        rows.append(("norm per repeat", "no values" if all(v is None for v in norms) else "NaN/Inf"))
    rows.append(("", "double-click: unfold all · right-click: show or open repeats"))
    return rows


def summary_rows(graph) -> list[tuple[str, str]]:
    """Memory of one training step (no optimizer state), and whether there are values."""
    mem = graph.graph.get("memory") or {}
    rows = []
    if graph.graph.get("meta"):
        rows.append(("values", META_TEXT))
        if graph.graph.get("meta_reason"):
            rows.append(("why", graph.graph["meta_reason"]))
    for key, label in (("params", "parameter memory"), ("grads", "gradient memory"),
                       ("activations", "activation memory"), ("step", "one step, total")):
        if mem.get(key) is not None:
            rows.append((label, byte_size(mem[key])))
    return rows
