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

How much is computed (``graph.graph['details']``):

* ``"full"`` (the default): every statistic of every node.
* ``"norms"``: the exact gradient norm of every node (``grad_norm``, ``grad_numel``;
  ``grad_nan``/``grad_inf`` are 0 when the norm is finite, None when they are unknown)
  and parameters' ``value_norm``; the rest on demand for the nodes a user looks at
  (``gradviz.core.trace.details``). About twice as fast on a transformer.
* ``"none"``: ``meta=True``, structure only on the meta device: shapes, dtypes,
  modules, source lines and memory estimates, no values at all (``core/script/meta.py``).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx
import torch
from torch import nn

from gradviz.core.trace import memory
from gradviz.core.stats import sharding
from gradviz.core.runtime.random_state import seeded
from gradviz.core.trace.capture import ForwardCapture
from gradviz.core.runtime.devices import model_device, to_device
from gradviz.core.runtime.gc_pause import gc_paused
from gradviz.core.trace.grad_fill import fill_leaf_grads, fill_param_stats, run_backward
from gradviz.core.trace.graph_build import add_param_node, build_graph, drop_recomputed_cuts
from gradviz.core.script.meta import build_meta_model, meta_forward
from gradviz.core.trace.modules import module_table
from gradviz.core.script.load import ModelScript, ScriptError, check_loss, error_from_exception, load_script
from gradviz.core.runtime.threads import trace_threads
from gradviz.core.trace.options import TraceOptions, resolve_options
from gradviz.core.trace.walk import is_leaf

log = logging.getLogger(__name__)


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
    parameters (for a script, ``model`` is a model already built from it, e.g. on the meta
    device); gradients are computed with ``torch.autograd.grad`` so your
    ``.grad`` fields are left untouched. Wrap your forward in
    ``with gradviz.capture(model) as cap:`` and pass ``capture=cap`` to also get
    module paths and source lines. Options are ``TraceOptions`` fields, also
    accepted as keywords (``trace(path, step=3)``, ``trace(path, meta=True)``). A script's step runs
    with all cores but one (``threads=0``: torch's setting as it is; ``core/runtime/threads.py``).
    """
    return trace_run(source, model, options=options, capture=capture, **overrides).graph


def trace_run(source: Any, model: nn.Module | None = None, *, options: TraceOptions | None = None,
              capture: ForwardCapture | None = None, **overrides: Any) -> TraceRun:
    options = resolve_options(options, overrides)
    start = time.perf_counter()
    tensors = isinstance(source, torch.Tensor) or (isinstance(source, (list, tuple)) and source
                                                   and all(isinstance(t, torch.Tensor) for t in source))
    # gc paused: the graph's many live objects would be re-scanned again and again
    with gc_paused(), trace_threads(options.threads, script=not tensors):
        if tensors:
            roots = [source] if isinstance(source, torch.Tensor) else list(source)
            run = _trace_tensors(roots, model, capture, options)
        else:
            script = source if isinstance(source, ModelScript) else load_script(source)
            run = _trace_script(script, options, model)
    run.graph.graph["trace_seconds"] = time.perf_counter() - start
    return run


def capture(model: nn.Module | None = None) -> ForwardCapture:
    """Context manager that records module paths and source lines of a forward pass."""
    return ForwardCapture(model)


# -- script mode ------------------------------------------------------------

@dataclass
class Prepared:
    """A script's model after forward: what trace and the on-demand details both start from."""

    model: nn.Module
    inputs: tuple
    targets: Any
    device: torch.device
    capture: ForwardCapture | None
    loss: torch.Tensor


def prepare(script: ModelScript, options: TraceOptions, model: nn.Module | None = None) -> Prepared:
    """``_prepare``; when the forward fails only because the inputs were made to require grad (a model
    that sets ``requires_grad`` on a tensor made from them: transformers' speech feature encoders), again
    with the inputs as the script made them: a trace shows the model the user wrote, without dL/dx."""
    rng = torch.get_rng_state()
    try:
        return _prepare(script, options, model)
    except ScriptError as exc:
        if exc.code != "forward-error" or not options.input_grads or options.meta or not _from_input_grads(exc):
            raise
        torch.set_rng_state(rng)
        try:
            return _prepare(script, replace(options, input_grads=False), model)
        except ScriptError:
            raise exc from exc.__cause__      # the first failure, with its own cause (what the user's code raised)


def _from_input_grads(exc: ScriptError) -> bool:
    """Whether a forward's failure can come from inputs that require grad: torch refusing ``requires_grad``
    on a tensor made from them (a non-leaf). Anything else (the script's own error, sys.exit, Ctrl-C) is
    not run a second time: the user's code runs once per trace."""
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, RuntimeError) and "requires_grad" in str(cause)


def _prepare(script: ModelScript, options: TraceOptions, model: nn.Module | None = None) -> Prepared:
    """Seed, build the model (on the meta device with ``options.meta``), fetch the batch,
    run forward and the loss. ``model``: one already built the way this would build it (seeded
    first: ``core/script/fit_guard.py``) or on the meta device; the random state is left as it is."""
    with seeded(options.seed if model is None else None):
        if options.meta:
            model = model if model is not None else build_meta_model(script)
            device = torch.device("meta")
        else:
            model = model if model is not None else script.new_model()
            device = torch.device(options.device) if options.device else model_device(model)
            model.to(device)
        inputs, targets = script.get_batch(options.step)
        inputs = tuple(to_device(t, device) for t in inputs)
        targets = to_device(targets, device)
        if options.input_grads:
            inputs = tuple(t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs)
        cap = ForwardCapture(model) if options.capture_forward else None
        with meta_forward(options.meta):
            if cap is not None:
                with cap:
                    raw = script.compute_loss(model, inputs, targets)
            else:
                raw = script.compute_loss(model, inputs, targets)
        return Prepared(model, inputs, targets, device, cap, script.check_loss(raw))


def input_names(inputs: tuple) -> dict[int, int]:
    return {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad}


def _trace_script(script: ModelScript, options: TraceOptions, model: nn.Module | None = None) -> TraceRun:
    p = prepare(script, options, model)
    model, loss = p.model, p.loss
    graph, node_ids = build_graph([loss], model, p.capture, input_names(p.inputs), options)
    if options.meta:
        _meta_backward(loss, script.loss_site())
        for name, param in model.named_parameters():
            attrs = graph.nodes[add_param_node(graph, name, param)]
            attrs["requires_grad"] = param.requires_grad
            if param.grad is not None:
                attrs["reachable"] = True   # backward re-ran its forward (reentrant checkpointing) and reached it
        graph.graph["details"] = "none"
    else:
        grads = run_backward(graph, node_ids, options, lambda: loss.backward(), script.loss_site())
        fill_param_stats(graph, model, {name: q.grad for name, q in model.named_parameters()}, options)
        fill_leaf_grads(graph, node_ids, grads, options)
        graph.graph["details"] = options.details
    graph.graph.update(script=str(script.path), step=options.step, device=str(p.device), meta=options.meta)
    if script.note:   # a model without a script: what gradviz invented (its inputs, its loss)
        graph.graph.update(invented=script.note, model_source=script.source)
    drop_recomputed_cuts(graph)
    if not options.meta:
        _add_cut_branches(graph, script, options)
    _finish_modules(graph, model)
    return TraceRun(graph, model, loss, p.inputs, p.targets, p.capture, node_ids, script)


def _meta_backward(loss: torch.Tensor, loss_site) -> None:
    """Backward with meta tensors: no values, but shapes are checked and errors surface."""
    try:
        loss.backward()
    except Exception as exc:
        path, line = loss_site
        raise error_from_exception(exc, "backward failed", "backward-error", (path, line) if path else None) from None


def _add_cut_branches(graph: nx.DiGraph, script: ModelScript, options: TraceOptions) -> None:
    """The computations cut off from the loss, drawn up to their cut (``core/trace/cut_branches.py``, views')."""
    from gradviz.core.trace.cut_branches import add_cut_branches
    from gradviz.core.runtime.errors import GradvizError

    try:
        add_cut_branches(graph, script, step=options.step, seed=options.seed, device=options.device)
    except GradvizError as exc:   # the forward ran once; if a rerun fails the graph stays without branches
        log.warning("cut branches not drawn: %s", exc)
        graph.graph["cut_branches_error"] = str(exc)


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

    grads = run_backward(graph, node_ids, options, backward, (None, None))
    grads.update(results)
    if model is not None:
        pid = sharding.param_names(model)       # FSDP2's unsharded parameters too
        by_name = {pid[id(fn.variable)]: g for fn, g in results.items() if id(fn.variable) in pid}
        by_name = sharding.fsdp_reduced(model, by_name)    # what FSDP's reduce-scatter would make of them
        fill_param_stats(graph, model, by_name, options)
    fill_leaf_grads(graph, node_ids, grads, options)
    device = roots[0].device
    graph.graph.update(script=None, step=None, device=str(device), details=options.details, meta=False)
    _finish_modules(graph, model)
    return TraceRun(graph, model, roots[0], (), None, cap, node_ids, None)


# -- modules ----------------------------------------------------------------

def _finish_modules(graph: nx.DiGraph, model: nn.Module | None) -> None:
    if model is not None:
        memory.account_model(graph, model)
    graph.graph["modules"] = module_table(model, graph) if model is not None else {}
