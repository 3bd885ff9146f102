"""The gradient half of a trace: hooks on every node during backward, then ``grad_*``/``value_*``
attributes of op, leaf and parameter nodes (``core/trace/tracer.py`` builds the graph and calls these).

With ``details="norms"`` a node gets the exact L2 norm of its gradient, accumulated in float64
(``torch.linalg.vector_norm(g, dtype=float64)``, what ``stats.norm_tensor`` computes), and the
rest on demand. The hook runs once per node of the graph (11,000 times for a 200-block GPT), so
the common case -- one plain strided CPU tensor of at most ``stats.CHUNK`` elements -- takes a
short path straight to that one reduction (``Norms.add_one``); everything else (sparse, complex,
DTensor, several tensors, huge, accelerator) goes through ``stats.norm_tensor`` as before. Both
paths run the same torch reduction on the same tensor, so the numbers are the same to the bit
(``tests/test_trace_norms.py``).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import networkx as nx
import torch
from torch import nn

from gradviz.core.runtime.ties import tied_with
from gradviz.core.stats import sharding
from gradviz.core.stats import tensors as gstats
from gradviz.core.trace.graph_build import add_param_node
from gradviz.core.script.load import error_from_exception
from gradviz.core.trace.walk import is_leaf

_F64 = torch.float64
_STRIDED = torch.strided
_PLAIN = (torch.Tensor, nn.Parameter)    # exactly these types: DTensors and other subclasses take the long path
_NO_STATS = {prefix: gstats.prefixed(None, prefix) for prefix in ("grad", "value")}
_KEYS = {prefix: (f"{prefix}_norm", f"{prefix}_numel", f"{prefix}_nan", f"{prefix}_inf") for prefix in _NO_STATS}


class Norms:
    """Norms computed during backward. On an accelerator they stay on the device and are
    copied to the host in one go at the end (one sync per device, not one per node); on
    the CPU they become floats at once (tiny tensors kept alive between a model's big
    gradient buffers would fragment the heap)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, Any, int]] = []   # (node id, prefix, norm, numel)

    def add_one(self, nid: str, prefix: str, t: torch.Tensor | None) -> None:
        """The norm of one tensor (a node's only gradient, a parameter's value or gradient)."""
        # the short path: exactly norm_tensor's single-tensor case (float64 accumulation), minus its
        # checks
        if (type(t) in _PLAIN and t.layout is _STRIDED and t.is_floating_point() and t.is_cpu
                and (n := t.numel()) <= gstats.CHUNK):
            if t.requires_grad:
                t = t.detach()
            self.entries.append((nid, prefix, torch.linalg.vector_norm(t, dtype=_F64).item(), n))
        else:
            self.add(nid, prefix, [t])

    def add(self, nid: str, prefix: str, tensors: Sequence[torch.Tensor | None]) -> bool:
        norm = gstats.norm_tensor(tensors)
        if norm is None:
            return False
        value = norm.item() if norm.device.type == "cpu" else norm
        self.entries.append((nid, prefix, value, sum(t.numel() for t in tensors if t is not None)))
        return True

    def fill(self, graph: nx.DiGraph) -> None:
        """Write the norms into their nodes (whose ``<prefix>_*`` were reset by ``no_stats``)."""
        by_device: dict[torch.device, list[int]] = {}
        for i, entry in enumerate(self.entries):
            if isinstance(entry[2], torch.Tensor):
                by_device.setdefault(entry[2].device, []).append(i)
        entries = self.entries
        for rows in by_device.values():
            values = torch.stack([entries[i][2] for i in rows]).cpu().tolist()
            for i, value in zip(rows, values):
                entries[i] = (*entries[i][:2], value, entries[i][3])
        nodes = graph.nodes
        for nid, prefix, norm, numel in entries:
            k_norm, k_numel, k_nan, k_inf = _KEYS[prefix]
            # no NaN/Inf elements when the norm is finite; unknown (None) until details are asked for if not
            counts = 0 if math.isfinite(norm) else None
            attrs = nodes[nid]
            attrs[k_norm], attrs[k_numel], attrs[k_nan], attrs[k_inf] = norm, numel, counts, counts
        entries.clear()


def no_stats(attrs: dict, prefix: str) -> None:
    """Every ``<prefix>_*`` statistic of a node reset to None (no gradient, or not computed yet)."""
    attrs.update(_NO_STATS[prefix])


def norm_attrs(prefix: str, norm: float | None, numel: int | None) -> dict:
    """The ``<prefix>_*`` attributes of a node whose details are not computed: the norm, the
    element count, and NaN/Inf counts of 0 when the norm is finite (then there are none),
    None when unknown; everything else None until details are asked for."""
    out = dict(_NO_STATS[prefix])
    if norm is None:
        return out
    finite = math.isfinite(norm)
    out.update({f"{prefix}_norm": norm, f"{prefix}_numel": numel,
                f"{prefix}_nan": 0 if finite else None, f"{prefix}_inf": 0 if finite else None})
    return out


def run_backward(graph: nx.DiGraph, node_ids: dict[Any, str], options: Any,
                 backward: Callable[[], None], loss_site) -> dict[Any, Any]:
    """Run ``backward`` with a prehook on every op node; fill op nodes' ``grad_*``.

    Returns grads seen at leaf nodes (inputs and other leaves) by their prehooks.
    Hooks are removed even when backward raises.
    """
    op_stats: dict[str, dict | None] = {}
    norms = Norms()
    leaf_grads: dict[Any, Any] = {}
    handles = []
    bins = options.histogram_bins
    full = options.details == "full"

    def op_hook(nid):
        if full:
            def hook(grad_outputs):
                op_stats[nid] = gstats.tensor_stats(sharding.whole(grad_outputs), bins)
        else:
            def hook(grad_outputs):
                if len(grad_outputs) == 1:
                    norms.add_one(nid, "grad", grad_outputs[0])
                else:
                    norms.add(nid, "grad", sharding.whole(grad_outputs))
        return hook

    def leaf_hook(fn):
        def hook(grad_outputs):
            leaf_grads[fn] = sharding.whole(grad_outputs)[0]
        return hook

    nodes = graph.nodes
    try:
        for fn, nid in node_ids.items():
            if is_leaf(fn):
                if nodes[nid]["kind"] != "param":
                    handles.append(fn.register_prehook(leaf_hook(fn)))
            else:
                handles.append(fn.register_prehook(op_hook(nid)))
        try:
            backward()
        except Exception as exc:
            path, line = loss_site
            raise error_from_exception(exc, "backward failed", "backward-error",
                                       (path, line) if path else None) from None
    finally:
        for h in handles:
            h.remove()
    for nid, attrs in graph.nodes(data=True):
        if attrs["kind"] == "op":
            if full:
                attrs.update(gstats.prefixed(op_stats.get(nid), "grad"))
            else:
                no_stats(attrs, "grad")
        elif attrs["kind"] == "loss":
            ones = [torch.ones(())]
            attrs.update(gstats.prefixed(gstats.tensor_stats(ones, bins), "grad") if full
                         else norm_attrs("grad", 1.0, 1))
    norms.fill(graph)
    return leaf_grads


def fill_leaf_grads(graph: nx.DiGraph, node_ids: dict[Any, str], grads: dict[Any, Any], options: Any) -> None:
    norms = Norms()
    nodes = graph.nodes
    for fn, nid in node_ids.items():
        attrs = nodes[nid]
        if attrs["kind"] in ("input", "leaf"):
            if options.details == "full":
                attrs.update(gstats.prefixed(gstats.tensor_stats([grads.get(fn)], options.histogram_bins), "grad"))
            else:
                no_stats(attrs, "grad")
                norms.add_one(nid, "grad", grads.get(fn))
    norms.fill(graph)


def fill_param_stats(graph: nx.DiGraph, model: nn.Module, grads: dict[str, Any], options: Any) -> None:
    """Gradient and value stats of every parameter. Parameters the backward never
    reached (unused, cut off, or frozen) are added as isolated nodes with
    ``reachable=False``, so a view can show them and a check can name them."""
    bins = options.histogram_bins
    full = options.details == "full"
    norms = Norms()
    nodes = graph.nodes
    twins = tied_with(model)       # one tensor under several names (lm_head tied to the embedding): one node
    for name, p, value, grad in sharding.whole_params(model, grads):     # DTensors: gathered whole
        nid = add_param_node(graph, name, p)
        attrs = nodes[nid]
        if twins.get(name):
            attrs["tied"] = list(twins[name])
        if not attrs.get("reachable") and grad is not None:
            attrs["reachable"] = True   # backward re-ran its forward (reentrant checkpointing) and reached it
        if full:
            attrs.update(gstats.prefixed(gstats.tensor_stats([grad], bins), "grad"))
            attrs.update(gstats.prefixed(gstats.tensor_stats([value], bins), "value"))
        else:
            no_stats(attrs, "grad")
            no_stats(attrs, "value")
            if grad is not None:
                norms.add_one(nid, "grad", grad)
            norms.add_one(nid, "value", value)
        attrs["requires_grad"] = p.requires_grad
    norms.fill(graph)
