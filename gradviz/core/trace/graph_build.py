"""The static traced graph: nodes and edges of an autograd graph with their facts, no gradients.

``build_graph`` walks from the roots (``walk.walk``), names every node
(``walk.node_ids_for``) and records shapes, module paths and source lines (from a
``ForwardCapture``), what each node saved for backward and the memory that keeps
alive (``core/trace/memory.py``). ``trace`` fills the gradients in afterwards.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import networkx as nx
import torch
from torch import nn

from gradviz.core.trace.module_guess import place_ops_by_parameters
from gradviz.core.trace import comm_nodes
from gradviz.core.trace import memory
from gradviz.core.stats import sharding
from gradviz.core.trace.walk import (custom_function, node_ids_for, output_metadata, readable_label, root_ids,
                               saved_tensors, storage_key, walk)

if TYPE_CHECKING:
    from gradviz.core.trace.capture import ForwardCapture
    from gradviz.core.trace.options import TraceOptions

GRAPH_FORMAT = 1


def build_graph(roots: Sequence[torch.Tensor], model: nn.Module | None, cap: "ForwardCapture | None",
                input_names: dict[int, int], options: "TraceOptions") -> tuple[nx.DiGraph, dict[Any, str]]:
    """The static graph (no gradients yet) and the map autograd node -> node id."""
    # over 60 lines: one pass per part of the graph (nodes, edges, loss roots, then annotations), in the order
    # of the graph schema in docs/ARCHITECTURE.md; every node kind's attributes are written in one place
    nodes, edges = walk([r.grad_fn for r in roots])
    param_names = sharding.param_names(model)      # FSDP2's unsharded parameters too
    module_types = {path: sharding.type_name(m) for path, m in model.named_modules()} if model is not None else {}
    origins = cap.origins if cap is not None else {}

    g = nx.DiGraph()
    node_ids: dict[Any, str] = {}
    kept: dict[str, list] = {}      # node id -> (storage, storage bytes, tensor bytes) of what it saved
    pairs = []
    for fn, nid in zip(nodes, node_ids_for(nodes, param_names, input_names)):
        attrs = _node_attrs(fn, nid, options.saved_tensors, kept, origins.get(fn))
        attrs["module_type"] = module_types.get(attrs["module"], "")
        attrs["reachable"] = True
        node_ids[fn] = nid
        pairs.append((nid, attrs))
    g.add_nodes_from(pairs)
    g.add_edges_from(_edges(edges, node_ids, dict(pairs)))

    rids = root_ids(len(roots))
    for i, (r, rid) in enumerate(zip(roots, rids)):
        value = r.detach().float().sum().item() if r.numel() == 1 and not r.is_meta else None
        g.add_node(rid, kind="loss", op="", label="loss" if len(roots) == 1 else f"loss {i}", shape=list(r.shape),
                   dtype=str(r.dtype).replace("torch.", ""), device=str(r.device), outputs=[], module="",
                   module_type="", location="", code="", call="", saved=[], custom=None, value=value,
                   reachable=True)
        g.add_edge(node_ids[r.grad_fn], rid, shape=list(r.shape), dtype=g.nodes[rid]["dtype"], output_nr=0, count=1)
    order = list(nx.topological_sort(g))
    _inherit_modules(g, order)
    if cap is None and model is not None:     # a loss traced after its forward: modules from the parameters
        place_ops_by_parameters(g, order, module_types, _sequence_numbers(node_ids), _tied_names(model, param_names))
    comm_nodes.annotate(g, model)      # FSDP / DTensor communication: labelled, in boxes of their own
    if options.saved_tensors:
        weights = {storage_key(t) for t in sharding.weight_tensors(model)}
        memory.account_saved(g, order, kept, weights)
    g.graph.update(format=GRAPH_FORMAT, roots=rids, loss=g.nodes[rids[0]].get("value"),
                   cuts=_cuts_summary(cap, node_ids))
    return g, node_ids


def _node_attrs(fn: Any, nid: str, saved: bool, kept: dict[str, list], origin: Any) -> dict[str, Any]:
    """The attributes of one autograd node (``nid`` from ``walk.node_ids_for``), before gradients."""
    outputs = output_metadata(fn)
    first = outputs[0] if outputs else _NO_OUTPUT
    attrs: dict[str, Any] = {
        "op": fn.name(), "label": readable_label(fn), "shape": first["shape"], "dtype": first["dtype"],
        "device": first["device"], "outputs": outputs, "module": "", "location": "", "code": "",
        "call": "", "saved": [], "custom": None,
    }
    kind = nid.partition(":")[0]
    if kind == "param":
        name = nid[len("param:"):]
        attrs.update(kind="param", param=name, label=name, module=name.rpartition(".")[0])
    elif kind == "input":
        i = int(nid[len("input:"):])
        attrs.update(kind="input", label=f"input {i}", input_index=i)
    elif kind == "leaf":
        attrs.update(kind="leaf", label="tensor")
    else:
        attrs["kind"] = "op"
        attrs["custom"] = custom_function(fn)
        if saved:
            kept[nid] = []
            attrs["saved"] = saved_tensors(fn, kept[nid])
        if origin is not None:
            attrs.update(module=origin.module, location=origin.location, code=origin.code, call=origin.call,
                         library_location=origin.library)
    return attrs


_NO_OUTPUT = {"shape": [], "dtype": "", "device": ""}


def _edges(edges: list[tuple[Any, Any, int]], node_ids: dict[Any, str],
           nodes: dict[str, dict]) -> list[tuple[str, str, dict]]:
    """``(u, v, attrs)`` per pair of nodes: the shape and dtype of the tensor that flows, ``output_nr``
    (of the first edge between them) and ``count`` (an op using one tensor twice, ``x * x``).
    ``nodes``: node id -> attributes."""
    out: dict[tuple[str, str], dict] = {}
    for src, dst, output_nr in edges:
        key = (node_ids[src], node_ids[dst])
        seen = out.get(key)
        if seen is not None:
            seen["count"] += 1
            continue
        outputs = nodes[key[0]]["outputs"]
        meta = outputs[output_nr] if output_nr < len(outputs) else (outputs[0] if outputs else {})
        out[key] = {"shape": meta.get("shape", []), "dtype": meta.get("dtype", ""), "output_nr": output_nr,
                    "count": 1}
    return [(u, v, attrs) for (u, v), attrs in out.items()]


def _inherit_modules(g: nx.DiGraph, order: list[str]) -> None:
    """Ops with no recorded origin take the module of the op that consumes them."""
    nodes = dict(g.nodes(data=True))
    for nid in reversed(order):
        attrs = nodes[nid]
        if attrs["kind"] == "op" and not attrs["location"]:
            for succ in g.successors(nid):
                s = nodes[succ]
                if s["kind"] == "op" and s["location"]:
                    attrs.update(module=s["module"], module_type=s["module_type"])
                    break


def _sequence_numbers(node_ids: dict[Any, str]) -> dict[str, int]:
    """Op id -> its autograd node's sequence number (forward order; core/trace/module_guess.py)."""
    out = {}
    for fn, nid in node_ids.items():
        number = getattr(fn, "_sequence_nr", None)
        if nid.startswith("op:") and number is not None:
            out[nid] = number()
    return out


def _tied_names(model: nn.Module, param_names: dict[int, str]) -> dict[str, list[str]]:
    """Graph parameter name -> every name of that one tensor, in declaration order (only ties)."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return {param_names[k]: group for k, group in names.items() if len(group) > 1 and k in param_names}


def _cuts_summary(cap: "ForwardCapture | None", node_ids: dict[Any, str]) -> list[dict]:
    if cap is None:
        return []
    return [{"op": c.op, "module": c.module, "location": c.location, "code": c.code,
             "nodes": [node_ids[fn] for fn in c.input_nodes if fn in node_ids], "checkpoint": c.checkpoint}
            for c in cap.cuts]


def drop_recomputed_cuts(graph: nx.DiGraph) -> None:
    """The no_grad of reentrant checkpointing cuts nothing when backward, re-running the checkpointed
    forward with grad, reached every trainable parameter (as the diagnosis's reachability says);
    while a parameter stays unreached, it may be why (a checkpoint whose inputs need no grad)."""
    unreached = any(a.get("kind") == "param" and a.get("reachable") is False and a.get("requires_grad", True)
                    for _, a in graph.nodes(data=True))
    if not unreached:
        graph.graph["cuts"] = [c for c in graph.graph.get("cuts", []) if not c.get("checkpoint")]


def add_param_node(graph: nx.DiGraph, name: str, p: torch.Tensor) -> str:
    """The node of parameter ``name``; one backward never reached is added as an isolated
    node with ``reachable=False`` (unused, cut off, or frozen)."""
    nid = f"param:{name}"
    if nid not in graph:
        graph.add_node(nid, kind="param", param=name, label=name, op="", shape=list(p.shape),
                       dtype=str(p.dtype).replace("torch.", ""), device=str(p.device), outputs=[],
                       module=name.rpartition(".")[0], module_type="", location="", code="", call="",
                       saved=[], custom=None, reachable=False)
    if (shard := sharding.layout(p)) is not None:
        graph.nodes[nid]["shard"] = shard       # a DTensor: global and local shape, mesh, placements
    return nid
