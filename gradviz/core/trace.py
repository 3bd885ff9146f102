"""``trace``: one forward and backward, returned as an annotated ``networkx.DiGraph``.

Node ids are deterministic: ``loss`` (or ``loss0``, ``loss1``… for several roots),
``param:<qualified name>``, ``input:<i>``, ``leaf:<k>`` for other leaf tensors and
``op:<k>`` for operations, ``k`` being the node's place in a depth-first walk from
the loss. Edges run in data-flow direction, inputs toward the loss.

Node attributes (every node): ``kind`` (param | input | leaf | op | loss), ``label``,
``op``, ``shape``, ``dtype``, ``device``, ``module``, ``location``, ``code``,
``saved``, ``custom`` and ``grad_norm``, ``grad_mean``, ``grad_std``, ``grad_min``,
``grad_max``, ``grad_zero_frac``, ``grad_nan``, ``grad_inf``, ``grad_numel``,
``grad_hist``; parameters also ``param`` and ``value_*``. ``grad_*`` are None
when no gradient flowed. Edges carry ``shape``, ``dtype`` and ``output_nr``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx
import torch
from torch import nn

from gradviz.core import stats as gstats
from gradviz.core.capture import ForwardCapture
from gradviz.core.devices import model_device, to_device
from gradviz.core.modules import module_table
from gradviz.core.script import ModelScript, check_loss, error_from_exception, load_script
from gradviz.core.walk import (custom_function, is_leaf, node_ids_for, output_metadata, readable_label,
                               root_ids, saved_tensors, walk)

GRAPH_FORMAT = 1


@dataclass
class TraceOptions:
    """What ``trace`` records. Defaults suit an interactive tool."""

    step: int = 0                 # which batch(step) to trace
    device: str | None = None     # None: leave the model where the script put it
    seed: int | None = 0          # torch.manual_seed before building the model
    histogram_bins: int = gstats.HIST_BINS
    input_grads: bool = True      # make float inputs require grad, so they appear (with dL/dx)
    saved_tensors: bool = True
    capture_forward: bool = True  # module path and source line per node


@dataclass
class TraceRun:
    """Everything one trace produced; ``graph`` is what the public API returns."""

    graph: nx.DiGraph
    model: nn.Module | None = None
    loss: torch.Tensor | None = None
    inputs: tuple = ()
    targets: Any = None
    capture: ForwardCapture | None = None
    node_ids: dict[Any, str] = field(default_factory=dict)   # autograd Node -> node id
    script: ModelScript | None = None


def trace(source: Any, model: nn.Module | None = None, *, options: TraceOptions | None = None,
          capture: ForwardCapture | None = None, **overrides: Any) -> nx.DiGraph:
    """Trace the autograd graph of a model script, or of a loss tensor you computed.

    ``source`` is a script path (or a loaded ``ModelScript``): gradviz builds the
    model, runs ``batch(step)``, forward, loss and backward. Or it is a loss tensor
    (or a list of root tensors) with a ``grad_fn``: pass ``model`` to name the
    parameters; gradients are computed with ``torch.autograd.grad`` so your
    ``.grad`` fields are left untouched. Wrap your forward in
    ``with gradviz.capture(model) as cap:`` and pass ``capture=cap`` to also get
    module paths and source lines. Options are ``TraceOptions`` fields, also
    accepted as keywords (``trace(path, step=3)``).
    """
    return trace_run(source, model, options=options, capture=capture, **overrides).graph


def trace_run(source: Any, model: nn.Module | None = None, *, options: TraceOptions | None = None,
              capture: ForwardCapture | None = None, **overrides: Any) -> TraceRun:
    options = options or TraceOptions()
    for key, value in overrides.items():
        if not hasattr(options, key):
            raise TypeError(f"trace() got an unexpected option {key!r}")
        setattr(options, key, value)
    start = time.perf_counter()
    if isinstance(source, torch.Tensor) or (isinstance(source, (list, tuple)) and source
                                            and all(isinstance(t, torch.Tensor) for t in source)):
        roots = [source] if isinstance(source, torch.Tensor) else list(source)
        run = _trace_tensors(roots, model, capture, options)
    else:
        script = source if isinstance(source, ModelScript) else load_script(source)
        run = _trace_script(script, options)
    run.graph.graph["trace_seconds"] = time.perf_counter() - start
    return run


def capture(model: nn.Module | None = None) -> ForwardCapture:
    """Context manager that records module paths and source lines of a forward pass."""
    return ForwardCapture(model)


# -- script mode ------------------------------------------------------------

def _trace_script(script: ModelScript, options: TraceOptions) -> TraceRun:
    if options.seed is not None:
        torch.manual_seed(options.seed)
    model = script.new_model()
    device = torch.device(options.device) if options.device else model_device(model)
    model.to(device)
    inputs, targets = script.get_batch(options.step)
    inputs = tuple(to_device(t, device) for t in inputs)
    targets = to_device(targets, device)
    if options.input_grads:
        inputs = tuple(t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs)
    cap = ForwardCapture(model) if options.capture_forward else None
    if cap is not None:
        with cap:
            raw = script.compute_loss(model, inputs, targets)
    else:
        raw = script.compute_loss(model, inputs, targets)
    loss = script.check_loss(raw)
    input_names = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad}
    graph, node_ids = build_graph([loss], model, cap, input_names, options)
    grads = _run_backward(graph, node_ids, [loss], options,
                          lambda: loss.backward(), script.loss_site())
    _fill_param_stats(graph, model, {name: p.grad for name, p in model.named_parameters()}, options)
    _fill_leaf_grads(graph, node_ids, grads)
    graph.graph.update(script=str(script.path), step=options.step, device=str(device))
    _finish_modules(graph, model)
    return TraceRun(graph, model, loss, inputs, targets, cap, node_ids, script)


# -- tensor mode ------------------------------------------------------------

def _trace_tensors(roots: list[torch.Tensor], model: nn.Module | None, cap: ForwardCapture | None,
                   options: TraceOptions) -> TraceRun:
    for r in roots:
        if r.grad_fn is None:
            check_loss(r)  # raises the clear message
    graph, node_ids = build_graph(roots, model, cap, {}, options)
    leaf_nodes = [fn for fn in node_ids if is_leaf(fn)]
    variables = [fn.variable for fn in leaf_nodes]
    results: dict[Any, torch.Tensor | None] = {}

    def backward() -> None:
        grad_outputs = [torch.ones_like(r) for r in roots]
        if variables:
            got = torch.autograd.grad(roots, variables, grad_outputs, retain_graph=True, allow_unused=True)
            results.update(zip(leaf_nodes, got))
        else:
            torch.autograd.backward(roots, grad_outputs, retain_graph=True)

    grads = _run_backward(graph, node_ids, roots, options, backward, (None, None))
    grads.update(results)
    by_name = {}
    if model is not None:
        pid = {id(p): name for name, p in model.named_parameters()}
        by_name = {pid[id(fn.variable)]: g for fn, g in results.items() if id(fn.variable) in pid}
        _fill_param_stats(graph, model, by_name, options)
    _fill_leaf_grads(graph, node_ids, grads)
    device = roots[0].device
    graph.graph.update(script=None, step=None, device=str(device))
    _finish_modules(graph, model)
    return TraceRun(graph, model, roots[0], (), None, cap, node_ids, None)


# -- building the graph -----------------------------------------------------

def build_graph(roots: Sequence[torch.Tensor], model: nn.Module | None, cap: ForwardCapture | None,
                input_names: dict[int, int], options: TraceOptions) -> tuple[nx.DiGraph, dict[Any, str]]:
    """The static graph (no gradients yet) and the map autograd node -> node id."""
    nodes, edges = walk([r.grad_fn for r in roots])
    param_names = {id(p): name for name, p in model.named_parameters()} if model is not None else {}
    module_types = {path: type(m).__name__ for path, m in model.named_modules()} if model is not None else {}
    origins = cap.origins if cap is not None else {}

    g = nx.DiGraph()
    node_ids: dict[Any, str] = {}
    for fn, nid in zip(nodes, node_ids_for(nodes, param_names, input_names)):
        outputs = output_metadata(fn)
        first = outputs[0] if outputs else {"shape": [], "dtype": "", "device": ""}
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
            if options.saved_tensors:
                attrs["saved"] = saved_tensors(fn)
            origin = origins.get(fn)
            if origin is not None:
                attrs.update(module=origin.module, location=origin.location, code=origin.code, call=origin.call)
        attrs["module_type"] = module_types.get(attrs["module"], "")
        attrs["reachable"] = True
        node_ids[fn] = nid
        g.add_node(nid, **attrs)

    for src, dst, output_nr in edges:
        u, v = node_ids[src], node_ids[dst]
        outputs = g.nodes[u]["outputs"]
        meta = outputs[output_nr] if output_nr < len(outputs) else (outputs[0] if outputs else {})
        if g.has_edge(u, v):
            g.edges[u, v]["count"] += 1
        else:
            g.add_edge(u, v, shape=meta.get("shape", []), dtype=meta.get("dtype", ""), output_nr=output_nr, count=1)

    rids = root_ids(len(roots))
    for i, (r, rid) in enumerate(zip(roots, rids)):
        value = r.detach().float().sum().item() if r.numel() == 1 else None
        g.add_node(rid, kind="loss", op="", label="loss" if len(roots) == 1 else f"loss {i}", shape=list(r.shape),
                   dtype=str(r.dtype).replace("torch.", ""), device=str(r.device), outputs=[], module="",
                   module_type="", location="", code="", call="", saved=[], custom=None, value=value,
                   reachable=True)
        g.add_edge(node_ids[r.grad_fn], rid, shape=list(r.shape), dtype=g.nodes[rid]["dtype"], output_nr=0, count=1)
    _inherit_modules(g)
    g.graph.update(format=GRAPH_FORMAT, roots=rids, loss=g.nodes[rids[0]].get("value"),
                   cuts=_cuts_summary(cap, node_ids))
    return g, node_ids


def _inherit_modules(g: nx.DiGraph) -> None:
    """Ops with no recorded origin take the module of the op that consumes them."""
    for nid in reversed(list(nx.topological_sort(g))):
        attrs = g.nodes[nid]
        if attrs["kind"] == "op" and not attrs["location"]:
            for succ in g.successors(nid):
                s = g.nodes[succ]
                if s["kind"] == "op" and s["location"]:
                    attrs.update(module=s["module"], module_type=s["module_type"])
                    break


def _cuts_summary(cap: ForwardCapture | None, node_ids: dict[Any, str]) -> list[dict]:
    if cap is None:
        return []
    return [{"op": c.op, "module": c.module, "location": c.location, "code": c.code,
             "nodes": [node_ids[fn] for fn in c.input_nodes if fn in node_ids]} for c in cap.cuts]


# -- gradients --------------------------------------------------------------

def _run_backward(graph: nx.DiGraph, node_ids: dict[Any, str], roots: Sequence[torch.Tensor],
                  options: TraceOptions, backward, loss_site) -> dict[Any, Any]:
    """Run ``backward`` with a prehook on every op node; fill op nodes' ``grad_*``.

    Returns grads seen at leaf nodes (inputs and other leaves) by their prehooks.
    Hooks are removed even when backward raises.
    """
    op_stats: dict[str, dict | None] = {}
    leaf_grads: dict[Any, Any] = {}
    handles = []
    bins = options.histogram_bins

    def op_hook(nid):
        def hook(grad_outputs):
            op_stats[nid] = gstats.tensor_stats(grad_outputs, bins)
        return hook

    def leaf_hook(fn):
        def hook(grad_outputs):
            leaf_grads[fn] = grad_outputs[0]
        return hook

    try:
        for fn, nid in node_ids.items():
            if is_leaf(fn):
                if graph.nodes[nid]["kind"] != "param":
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
    for nid in graph.nodes:
        attrs = graph.nodes[nid]
        if attrs["kind"] == "op":
            attrs.update(gstats.prefixed(op_stats.get(nid), "grad"))
        elif attrs["kind"] == "loss":
            ones = [torch.ones(())]
            attrs.update(gstats.prefixed(gstats.tensor_stats(ones, bins), "grad"))
    return leaf_grads


def _fill_leaf_grads(graph: nx.DiGraph, node_ids: dict[Any, str], grads: dict[Any, Any]) -> None:
    for fn, nid in node_ids.items():
        attrs = graph.nodes[nid]
        if attrs["kind"] in ("input", "leaf"):
            attrs.update(gstats.prefixed(gstats.tensor_stats([grads.get(fn)]), "grad"))


def _fill_param_stats(graph: nx.DiGraph, model: nn.Module, grads: dict[str, Any], options: TraceOptions) -> None:
    """Gradient and value stats of every parameter. Parameters the backward never
    reached (unused, cut off, or frozen) are added as isolated nodes with
    ``reachable=False``, so a view can show them and a check can name them."""
    bins = options.histogram_bins
    for name, p in model.named_parameters():
        nid = add_param_node(graph, name, p)
        attrs = graph.nodes[nid]
        attrs.update(gstats.prefixed(gstats.tensor_stats([grads.get(name)], bins), "grad"))
        attrs.update(gstats.prefixed(gstats.tensor_stats([p], bins), "value"))
        attrs["requires_grad"] = p.requires_grad


def add_param_node(graph: nx.DiGraph, name: str, p: torch.Tensor) -> str:
    """The node of parameter ``name``; one backward never reached is added as an isolated
    node with ``reachable=False`` (unused, cut off, or frozen)."""
    nid = f"param:{name}"
    if nid not in graph:
        graph.add_node(nid, kind="param", param=name, label=name, op="", shape=list(p.shape),
                       dtype=str(p.dtype).replace("torch.", ""), device=str(p.device), outputs=[],
                       module=name.rpartition(".")[0], module_type="", location="", code="", call="",
                       saved=[], custom=None, reachable=False)
    return nid


def _finish_modules(graph: nx.DiGraph, model: nn.Module | None) -> None:
    graph.graph["modules"] = module_table(model, graph) if model is not None else {}
