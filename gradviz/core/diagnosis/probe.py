"""One instrumented forward and backward of a script: what every check reads.

``run_probe`` builds the model the way ``trace`` does (seed, inputs made to require
grad), so the node ids it hands out (``op:<k>``, ``param:<name>``) are the ids of the
traced graph the window shows. When the forward fails only because of that change (it
raises with gradviz's grad-requiring inputs and runs with the inputs as the script made
them: transformers' speech feature encoders set ``hidden_states.requires_grad = True``,
which raises on a non-leaf), the probe is the run with the inputs as given
(``Probe.inputs_as_given``): a check judges the model the user wrote, never a changed one. The forward runs under ``DiagnosticCapture``; backward
runs with a hook on every node (the node being run when backward raised, where
non-finite gradients were born).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gradviz.core.stats import sharding
from gradviz.core.runtime.random_state import seeded
from gradviz.core.runtime.devices import model_device, to_device
from gradviz.core.diagnosis.diagnostic_capture import DiagnosticCapture
from gradviz.core.script.load import ModelScript, ScriptError
from gradviz.core.trace.walk import is_leaf, walk



@dataclass
class Probe:
    """What one instrumented forward + backward of a script saw."""

    script: ModelScript
    model: nn.Module | None = None
    inputs: tuple = ()
    targets: Any = None
    capture: DiagnosticCapture | None = None
    raw_loss: Any = None
    loss: torch.Tensor | None = None
    error: ScriptError | None = None              # forward / loss problems (ScriptError.code says which)
    backward_error: BaseException | None = None
    nodes: list[Any] = field(default_factory=list)
    node_ids: dict[Any, str] = field(default_factory=dict)
    param_names: dict[int, str] = field(default_factory=dict)
    reached: set[str] = field(default_factory=set)        # params the loss depends on
    # params outside the forward-time graph that backward reached all the same, with the node whose backward
    # re-ran their forward (reentrant activation checkpointing recomputes its forward inside backward)
    recomputed: dict[str, str] = field(default_factory=dict)
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    last_node: Any = None                                  # node being run when backward raised
    backward_births: list[tuple[Any, str]] = field(default_factory=list)   # (node, 'nan'|'inf')
    seconds: float = 0.0
    inputs_as_given: bool = False      # the model failed with inputs made to require grad, and ran without

    @property
    def forward_ok(self) -> bool:
        return self.error is None and self.loss is not None

    @property
    def backward_ok(self) -> bool:
        return self.forward_ok and self.backward_error is None

    def node_id(self, fn: Any) -> str | None:
        return self.node_ids.get(fn) if fn is not None else None


def run_probe(script: ModelScript, *, step: int = 0, seed: int | None = 0, model: nn.Module | None = None,
              backward: bool = True, activations: bool = True) -> Probe:
    """Forward (instrumented), loss checks and backward (with a hook on every node).

    Raises ScriptError only when the model or the batch cannot be made; problems of
    forward, loss and backward are recorded on the returned ``Probe``.
    """
    start = time.perf_counter()
    built = model is None
    rng = torch.get_rng_state()
    probe = _forward(script, step, seed, model, activations, input_grads=True)
    if probe.error is not None and probe.error.code == "forward-error" and _float_inputs(probe.inputs):
        # did gradviz's change (inputs that require grad) make it fail? Run the model as the script gave it,
        # drawing the same random numbers
        torch.set_rng_state(rng)
        again = _forward(script, step, seed, None if built else probe.model, activations, input_grads=False)
        if again.error is None or again.error.code != "forward-error":
            probe = again
            probe.inputs_as_given = True
    if probe.error is None:
        _name_nodes(probe)
        probe.capture.customs.match_nodes(probe.nodes)
        if backward:
            _backward(probe)
    probe.seconds = time.perf_counter() - start
    return probe


def _float_inputs(inputs: tuple) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in inputs)


def _forward(script: ModelScript, step: int, seed: int | None, model: nn.Module | None, activations: bool,
             input_grads: bool) -> Probe:
    with seeded(seed if model is None else None):
        if model is None:
            model = script.new_model()
        device = model_device(model)
        inputs, targets = script.get_batch(step)
        inputs = tuple(to_device(t, device) for t in inputs)
        targets = to_device(targets, device)
        if input_grads:
            inputs = tuple(t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs)
        probe = Probe(script, model, inputs, targets)
        probe.param_names = {id(p): n for n, p in model.named_parameters()}
        cap = DiagnosticCapture(model, activations=activations)
        probe.capture = cap
        try:
            with cap:
                probe.raw_loss = script.compute_loss(model, inputs, targets)
            probe.loss = script.check_loss(probe.raw_loss)
        except ScriptError as exc:
            probe.error = exc
        return probe


def _name_nodes(probe: Probe) -> None:
    """The ids ``trace`` gives the same nodes (same walk, same naming)."""
    probe.param_names = sharding.param_names(probe.model)      # FSDP2's unsharded parameters exist now
    nodes, _ = walk([probe.loss.grad_fn])
    input_names = {id(t): i for i, t in enumerate(probe.inputs)
                   if isinstance(t, torch.Tensor) and t.requires_grad}
    leaf_count = 0
    for k, fn in enumerate(nodes):
        if is_leaf(fn):
            var = fn.variable
            if id(var) in probe.param_names:
                name = probe.param_names[id(var)]
                probe.node_ids[fn] = f"param:{name}"
                probe.reached.add(name)
            elif id(var) in input_names:
                probe.node_ids[fn] = f"input:{input_names[id(var)]}"
            else:
                probe.node_ids[fn] = f"leaf:{leaf_count}"
                leaf_count += 1
        else:
            probe.node_ids[fn] = f"op:{k}"
    probe.nodes = nodes


def _finite_kind(tensors) -> str | None:
    kind = None
    for t in tensors:
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and not t.is_meta:
            if bool(torch.isfinite(t.sum())):
                continue
            if bool(torch.isnan(t).any()):
                return "nan"
            if bool(torch.isinf(t).any()):
                kind = "inf"
    return kind


def _watch_recomputation(probe: Probe, handles: list) -> None:
    """Hooks on the parameters the forward graph does not hold: one that still gets a gradient
    was reached by a backward that re-ran forward (reentrant checkpointing); note which node."""
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        return      # torch < 2.1: _collect_recomputed still sees the gradient, without the node

    def hook(name):
        def on_grad(p):
            probe.recomputed.setdefault(name, probe.node_id(probe.last_node) or "")
        return on_grad

    for name, p in probe.model.named_parameters():
        if p.requires_grad and name not in probe.reached:
            handles.append(p.register_post_accumulate_grad_hook(hook(name)))


def _collect_recomputed(probe: Probe) -> None:
    for name, g in probe.grads.items():
        if g is not None and name not in probe.reached:
            probe.recomputed.setdefault(name, "")
    probe.reached |= set(probe.recomputed)


def _backward(probe: Probe) -> None:
    handles: list = []

    def pre(fn):
        def hook(grad_outputs):
            probe.last_node = fn
        return hook

    def post(fn):
        def hook(grad_inputs, grad_outputs):
            if len(probe.backward_births) < 8 and _finite_kind(grad_outputs) is None:
                kind = _finite_kind(grad_inputs)
                if kind is not None:
                    probe.backward_births.append((fn, kind))
        return hook

    model = probe.model
    for p in model.parameters():
        p.grad = None
    try:
        for fn in probe.nodes:
            if not is_leaf(fn):
                handles.append(fn.register_prehook(pre(fn)))
                handles.append(fn.register_hook(post(fn)))
        _watch_recomputation(probe, handles)
        try:
            probe.loss.backward()
        except Exception as exc:   # in-place, custom Function shapes, ...
            probe.backward_error = exc
    finally:
        for h in handles:
            h.remove()
    probe.grads = {n: p.grad for n, p in model.named_parameters()}
    _collect_recomputed(probe)
