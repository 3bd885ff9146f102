"""Statistics a fast trace left out, computed on demand for the nodes a user looks at.

A trace with ``details="norms"`` keeps the exact gradient norm of every node and leaves
the rest (mean, std, min, max, zeros, histogram; parameters' value statistics) for
later. ``node_details`` replays the script the way the trace ran it (same seed, same
batch, so the same graph and the same node ids) with hooks on the requested nodes only,
and returns their full statistics. Run it off the UI thread (it is a forward and a
backward). If the replay's graph differs from the traced one (the script changed on
disk), it says so instead of returning numbers of another graph.
"""
from __future__ import annotations

import math

from typing import Any, Iterable

import networkx as nx
import torch

from gradviz.core.stats import sharding
from gradviz.core.stats import tensors as gstats
from gradviz.core.runtime.errors import GradvizError
from gradviz.core.script.load import ModelScript, error_from_exception, load_script
from gradviz.core.trace.options import TraceOptions
from gradviz.core.trace.tracer import input_names, prepare
from gradviz.core.runtime.threads import trace_threads
from gradviz.core.trace.walk import _saved_names, is_leaf, node_ids_for, walk


class DetailsError(GradvizError):
    """The details cannot be computed for this graph (meta trace, script changed, no script)."""


def options_of(graph: nx.DiGraph) -> TraceOptions:
    """The options a script-mode trace of ``graph`` ran with (step; seed 0 as the trace uses)."""
    return TraceOptions(step=graph.graph.get("step") or 0, details="full")


def node_details(graph: nx.DiGraph, node_ids: Iterable[str], script: Any = None,
                 options: TraceOptions | None = None) -> dict[str, dict]:
    """``{node id: {grad_*, value_* (parameters)}}`` with every statistic, for ``node_ids``.

    ``graph`` is the traced graph (its script, step and node count identify the replay);
    ``script`` a loaded ``ModelScript`` or a path (default: the graph's own script).
    """
    options = options or options_of(graph)
    # the trace's thread count (core/runtime/threads.py): the replay's gradients are the traced ones to the bit
    with trace_threads(options.threads):
        return _replay(graph, node_ids, script, options)


def _replay(graph: nx.DiGraph, node_ids: Iterable[str], script: Any, options: TraceOptions) -> dict[str, dict]:
    # over 60 lines: one replay (rebuild, check it is the same graph, hook, backward, read) whose steps share
    # the replay's autograd nodes, which must not outlive the call
    if graph.graph.get("meta"):
        raise DetailsError("this graph was traced on the meta device: it has no values")
    source = script if script is not None else graph.graph.get("script")
    if source is None:
        raise DetailsError("this graph was not traced from a script: its details cannot be recomputed")
    wanted = [n for n in dict.fromkeys(node_ids) if n in graph]
    if not wanted:
        return {}
    ms = source if isinstance(source, ModelScript) else load_script(source)
    p = prepare(ms, options)
    nodes, _ = walk([p.loss.grad_fn])
    params = sharding.param_names(p.model)      # FSDP2's unsharded parameters too
    ids = node_ids_for(nodes, params, input_names(p.inputs))
    _same_graph(graph, nodes, ids)
    by_id = dict(zip(ids, nodes))
    out: dict[str, dict] = {}
    saved = {nid: saved_stats(by_id[nid]) for nid in wanted if nid in by_id and not is_leaf(by_id[nid])}
    grads: dict[str, Any] = {}
    handles = []
    bins = options.histogram_bins

    def hook(nid: str, leaf: bool):
        def run(grad_outputs):
            grad_outputs = sharding.whole(grad_outputs)      # DTensors gathered (every rank asks the same nodes)
            if leaf:
                grads[nid] = grad_outputs[0]
            else:
                out[nid] = gstats.prefixed(gstats.tensor_stats(grad_outputs, bins), "grad")
        return run

    try:
        for nid in wanted:
            fn = by_id.get(nid)
            if fn is not None and not nid.startswith("param:"):
                handles.append(fn.register_prehook(hook(nid, is_leaf(fn))))
        try:
            p.loss.backward()
        except Exception as exc:
            path, line = ms.loss_site()
            raise error_from_exception(exc, "backward failed", "backward-error", (path, line) if path else None)
    finally:
        for h in handles:
            h.remove()
    for nid, g in grads.items():
        out[nid] = gstats.prefixed(gstats.tensor_stats([g], bins), "grad")
    for nid, entries in saved.items():
        out.setdefault(nid, {})["saved_stats"] = entries
    named = dict(p.model.named_parameters())
    for nid in wanted:
        if nid.startswith("param:") and nid[len("param:"):] in named:
            q = named[nid[len("param:"):]]
            out[nid] = {**gstats.prefixed(gstats.tensor_stats([sharding.full_tensor(q.grad)], bins), "grad"),
                        **gstats.prefixed(gstats.tensor_stats([sharding.full_tensor(q)], bins), "value")}
        elif nid in graph and graph.nodes[nid].get("kind") == "loss":
            out[nid] = gstats.prefixed(gstats.tensor_stats([torch.ones(())], bins), "grad")
    _same_numbers(graph, out)
    return out


def _same_numbers(graph: nx.DiGraph, out: dict[str, dict]) -> None:
    """The replay must be the traced step: its gradient norms are the ones the trace measured
    (same threads, same seed). A script drawing from a random source the seed does not fix, or a
    replay that ran while training in the same process drew from torch's global generator, gives
    others; those are another step's numbers and are refused, never shown as the traced ones."""
    for nid, attrs in out.items():
        traced, replayed = graph.nodes[nid].get("grad_norm"), attrs.get("grad_norm")
        if traced is None or replayed is None or not (math.isfinite(traced) and math.isfinite(replayed)):
            continue
        if abs(replayed - traced) > 1e-4 * max(abs(traced), 1e-12):
            raise DetailsError(f"the replay did not reproduce the traced step (gradient norm {replayed:.6g}, "
                               f"traced {traced:.6g}): the script's randomness is not fixed by its seed, or "
                               "training ran at the same time; trace again to see the details")


def saved_stats(fn) -> list[dict]:
    """``[{name, norm, mean, min, max, numel}]`` of the tensors a node saved for backward (read
    before backward frees them), in the order ``walk.saved_tensors`` lists them."""
    out = []
    for attr in _saved_names(fn):
        try:
            value = getattr(fn, attr)
        except Exception:  # noqa: BLE001 - freed or unreadable: saved_tensors skips it too
            continue
        tensors = [value] if isinstance(value, torch.Tensor) else (
            list(value) if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor)
                                                                           for v in value) else [])
        for i, t in enumerate(tensors):
            name = attr[len("_saved_"):] + (f"[{i}]" if len(tensors) > 1 or not isinstance(value, torch.Tensor) else "")
            st = gstats.tensor_stats([t], bins=0) if t.is_floating_point() or t.is_complex() else None
            out.append({"name": name, **({k: st[k] for k in ("norm", "mean", "min", "max", "numel")} if st else {})})
    return out


def _same_graph(graph: nx.DiGraph, nodes: list, ids: list[str]) -> None:
    traced = sum(1 for _, a in graph.nodes(data=True) if a.get("kind") != "loss" and a.get("reachable", True))
    if len(ids) != traced or any(i not in graph or graph.nodes[i].get("op") != fn.name()
                                 for i, fn in zip(ids, nodes)):
        raise DetailsError("the script no longer builds the graph that was traced (was it edited?): "
                           "reload it to see its details")
