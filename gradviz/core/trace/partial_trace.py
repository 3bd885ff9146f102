"""The graph of a failing forward: everything computed up to the call that raised.

When the forward (or ``loss_fn`` / ``compute_loss``) raises — a shape mismatch, a dtype
error — ``trace`` can only report the error. ``trace_failure`` runs the same forward
again under ``FailureCapture``: a ``ForwardCapture`` that also remembers the torch call
that raised (its name, module, user line and every tensor argument) and each tensor
the forward produced. The autograd graph behind those tensors is the computation done
so far; the failing call becomes one more node, ``failed``, drawn in red, fed by its
arguments (edges labelled with their shapes), and carrying the error and its
``file:line``. A failure outside any torch call (a Python ``raise`` in the model) gets
the same node, fed by the last values computed.

Node ids are those ``trace`` gives (same walk) plus ``failed`` and ``failed-arg:<i>``
(tensor arguments with no graph node: the batch's targets, buffers, constants).
``graph.graph["failed"]`` = {node, op, message, location, code, error_type, inputs}.
"""
from __future__ import annotations

import linecache
import logging
import os
import threading
import traceback
import time
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from gradviz.core.stats import tensors as gstats
from gradviz.core.trace.capture import ForwardCapture, _func_name
from gradviz.core.runtime.formatting import shape_text
from gradviz.core.runtime.locations import GRADVIZ_DIR, STDLIB_DIR, is_user_file
from gradviz.core.trace.modules import module_table
from gradviz.core.script.load import ModelScript, ScriptError, load_script
from gradviz.core.script.run import prepare
from gradviz.core.trace.graph_build import add_param_node, build_graph
from gradviz.core.trace.options import TraceOptions
from gradviz.core.trace.walk import walk

log = logging.getLogger(__name__)

_TORCH_DIR = os.path.dirname(torch.__file__)

FAILED = "failed"
_NO_GRAD = gstats.prefixed(None, "grad")


@dataclass
class FailedCall:
    """The torch call that raised, with its tensor arguments (kept alive for the drawing)."""

    op: str
    module: str
    location: str
    code: str
    error: BaseException
    tensors: list[torch.Tensor] = field(default_factory=list)


class FailureCapture(ForwardCapture):
    """``ForwardCapture`` that also records the call that raised and what forward produced."""

    def __init__(self, model: nn.Module | None = None) -> None:
        super().__init__(model)
        self.failure: FailedCall | None = None
        self.produced: dict[Any, torch.Tensor] = {}     # grad_fn -> a tensor it made (insertion = call order)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        try:
            out = super().__torch_function__(func, types, args, kwargs)
        except Exception as exc:
            if threading.get_ident() == self._thread and (self.failure is None or self.failure.error is not exc):
                tensors = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
                self.failure = FailedCall(_func_name(func), self._stack[-1], *self._user_location(), exc, tensors)
            raise
        if threading.get_ident() == self._thread:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn not in self.produced:
                    self.produced[t.grad_fn] = t
        return out

    def failed_call_for(self, exc: BaseException) -> FailedCall | None:
        """The recorded call, if ``exc`` (what the forward raised) is its error or was raised from it."""
        seen = set()
        while exc is not None and id(exc) not in seen:
            if self.failure is not None and exc is self.failure.error:
                return self.failure
            seen.add(id(exc))
            exc = exc.__cause__ or exc.__context__
        return None


def trace_failure(source: Any, *, step: int = 0, seed: int | None = 0, device: str | None = None
                  ) -> nx.DiGraph | None:
    """The partial graph of a forward that raises, or None when the forward runs (or the
    model / batch cannot even be made: then there is nothing to draw)."""
    start = time.perf_counter()
    script = source if isinstance(source, ModelScript) else load_script(source)
    run = prepare(script, step=step, seed=seed, device=device)
    model, dev, inputs, targets = run.model, run.device, run.inputs, run.targets
    cap = FailureCapture(model)
    try:
        with cap:
            script.compute_loss(model, inputs, targets)
    except ScriptError as exc:
        graph = _partial_graph(cap, model, inputs, exc)
        graph.graph.update(script=str(script.path), step=step, device=str(dev),
                           trace_seconds=time.perf_counter() - start)
        return graph
    return None


def _partial_graph(cap: FailureCapture, model: nn.Module, inputs: tuple, error: ScriptError) -> nx.DiGraph:
    raised = error.__cause__ or error.__context__ or error
    call = cap.failed_call_for(raised)
    sinks = _sinks(cap.produced)
    input_names = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad}
    roots = [cap.produced[fn] for fn in sinks]
    if roots:
        graph, node_ids = build_graph(roots, model, cap, input_names, TraceOptions())
        graph.remove_nodes_from([n for n, a in list(graph.nodes(data=True)) if a.get("kind") == "loss"])
    else:
        graph, node_ids = nx.DiGraph(), {}
        graph.graph.update(cuts=[])
    for attrs in graph.nodes.values():
        for key, value in _NO_GRAD.items():
            attrs.setdefault(key, value)
    feeds = call.tensors if call is not None else roots
    _add_failed_node(graph, node_ids, model, inputs, feeds, call, error, type(raised).__name__)
    graph.graph.update(roots=[FAILED], loss=None, partial=True, modules=module_table(model, graph))
    return graph


def _sinks(produced: dict[Any, torch.Tensor]) -> list[Any]:
    """Produced nodes nothing else consumed: the live ends of the computation so far."""
    if not produced:
        return []
    _, edges = walk(list(produced))
    consumed = {src for src, _dst, _nr in edges}
    return [fn for fn in produced if fn not in consumed]


def _add_failed_node(graph: nx.DiGraph, node_ids: dict[Any, str], model: nn.Module, inputs: tuple,
                     feeds: list[torch.Tensor], call: FailedCall | None, error: ScriptError,
                     error_type: str) -> None:
    message = error.message
    location = error.location or ""
    if call is not None:
        # no user or library frame inside the forward (an nn.Sequential of torch modules): no line
        # to show, the module says more (the stack outside the forward is not the failing call's)
        where, code = _failure_site(call.error) or ("", "")
        op, module = call.op, call.module
    else:
        op, module, where, code = error_type, "", location, ""
    arg_facts = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in feeds]
    shapes = " · ".join(_shape(a["shape"]) for a in arg_facts) if call is not None else ""
    graph.add_node(FAILED, kind="op", op=op, label=f"✗ {op}", note=shapes, failed=True, error=message,
                   shape=[], dtype="", device="", outputs=[], module=module,
                   module_type=type(model.get_submodule(module)).__name__ if module else "",
                   location=where, code=code, call=op, saved=[], custom=None, reachable=True, inputs=arg_facts,
                   **_NO_GRAD)
    params = {id(p): name for name, p in model.named_parameters()}
    by_input = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    for k, t in enumerate(feeds):
        src = _source_node(graph, node_ids, t, params, by_input, k)
        if graph.has_edge(src, FAILED):
            graph.edges[src, FAILED]["count"] += 1
            continue
        graph.add_edge(src, FAILED, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                       output_nr=0, count=1, arg=k)
    graph.graph["failed"] = {"node": FAILED, "op": op, "message": message, "location": where, "code": code,
                             "error_type": error_type, "inputs": arg_facts}


def _failure_site(exc: BaseException) -> tuple[str, str] | None:
    """``(file:line, code)`` where the failing call was made: the innermost frame of user code in
    the error's traceback, else the innermost library frame (a transformers model's line), never
    torch's or gradviz's own. The traceback runs from the forward's call inward, so frames of
    whoever called gradviz (a notebook, a test) are not candidates."""
    user = library = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        raw = frame.f_code.co_filename
        name = os.path.abspath(raw)
        if raw.startswith("<") or name.startswith((_TORCH_DIR, GRADVIZ_DIR)):
            continue
        site = (f"{name}:{lineno}", linecache.getline(name, lineno).strip())
        if is_user_file(name):
            user = site
        elif "site-packages" in name or not name.startswith(STDLIB_DIR):   # site-packages sits in the stdlib dir
            library = site
    return user or library


def _source_node(graph: nx.DiGraph, node_ids: dict[Any, str], t: torch.Tensor, params: dict[int, str],
                 by_input: dict[int, int], k: int) -> str:
    """The node a tensor argument of the failing call comes from (added when it has none)."""
    if t.grad_fn is not None and t.grad_fn in node_ids:
        return node_ids[t.grad_fn]
    if id(t) in params:
        nid = add_param_node(graph, params[id(t)], t)
        graph.nodes[nid]["reachable"] = True        # used by the failing call: not a cut-off parameter
        for key, value in _NO_GRAD.items():
            graph.nodes[nid].setdefault(key, value)
        return nid
    if id(t) in by_input:
        nid = f"input:{by_input[id(t)]}"
        if nid not in graph:
            graph.add_node(nid, kind="input", label=f"input {by_input[id(t)]}", input_index=by_input[id(t)],
                           **_leaf_attrs(t))
        return nid
    nid = f"failed-arg:{k}"
    graph.add_node(nid, kind="leaf", label="tensor" if t.grad_fn is None else "value", **_leaf_attrs(t))
    return nid


def _leaf_attrs(t: torch.Tensor) -> dict:
    return dict(op="", shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""), device=str(t.device),
                outputs=[], module="", module_type="", location="", code="", call="", saved=[], custom=None,
                reachable=True, **_NO_GRAD)


def _shape(shape: list[int]) -> str:
    return shape_text(shape)


def failure_graph_for(error: BaseException, source: Any, *, step: int = 0, device: str | None = None
                      ) -> nx.DiGraph | None:
    """The partial graph for an error ``trace`` raised, when it was the forward or loss that
    failed (``ScriptError.code == "forward-error"``); None otherwise or when it cannot be made."""
    if not isinstance(error, ScriptError) or error.code != "forward-error":
        return None
    if isinstance(error.__cause__ or error.__context__, (SystemExit, KeyboardInterrupt)):
        return None       # the script asked to stop: running it again would only stop again
    try:
        return trace_failure(source, step=step, device=device)
    except ScriptError as exc:       # the rerun failed earlier (a script with side effects): no drawing
        log.warning("no partial graph: %s", exc)
        return None
