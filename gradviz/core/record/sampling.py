"""Node-norm sampling for ``watch``: the backward tap and the per-node gradient norms of sampled steps.

See "How node norms are taken" in ``gradviz.core.record.recorder``. ``NodeSampling`` is a
mixin of ``Watch``: its methods run as the watch's own (no extra call on the step path)
and use the watch's ``every``, ``_step``, ``_closed``, ``module``, ``stats``,
``param_names``, ``record_graph``, ``capture_modules`` and ``_writer``.
"""
from __future__ import annotations

import functools
import hashlib
import operator
import threading
import weakref

import numpy as np
import torch

from gradviz.core.nodenorms import NodeNormSampler, hook_plan, node_ids_for
from gradviz.core.record.schema import NO_VALUE
from gradviz.core.walk import walk

__all__ = ["NodeSampling"]

_ACCUMULATE_GRAD = torch._C._functions.AccumulateGrad       # the node type of a leaf (a parameter)
_producer, _consumer, _output_nr = (operator.itemgetter(i) for i in range(3))


class _BackwardTap:
    """Hands this thread's next backward call to ``watch``.

    ``torch.autograd.backward`` (what ``Tensor.backward`` calls, and what some loops call
    directly) is swapped for a pass-through wrapper from the ``w.step`` before a sampled step
    until that step's backward (or the next ``w.step``), then put back. The same reach as a
    ``TorchFunctionMode`` waiting for ``Tensor.backward``, at a fraction of the cost: a mode
    routes every op of the loss through Python too. A module attribute, not ``Tensor``'s: a
    class attribute write would reset every cached method lookup on tensors. Other threads'
    calls pass straight through; if something else swapped the function in the meantime, the
    wrapper is left in place, disarmed.
    """

    def __init__(self, owner: "NodeSampling") -> None:
        self._owner = weakref.ref(owner)
        self._thread = threading.get_ident()
        self.armed = False
        self.original = None
        self._wrapper = self._wrapped = None

    def arm(self) -> None:
        """Swap in the wrapper (rebuilt only when the function it wraps changed)."""
        self._thread = threading.get_ident()
        self.original = original = torch.autograd.backward
        if self._wrapped is not original:
            tap = self

            @functools.wraps(original)
            def backward(tensors, *args, **kwargs):
                if tap.armed and threading.get_ident() == tap._thread:
                    tap.close()
                    owner = tap._owner()
                    if owner is not None:
                        return owner._sampled_backward(original, (tensors,) + args, kwargs)
                return original(tensors, *args, **kwargs)

            self._wrapper, self._wrapped = backward, original
        self.armed = True
        torch.autograd.backward = self._wrapper

    def close(self) -> None:
        self.armed = False
        if self._wrapper is not None and torch.autograd.backward is self._wrapper:
            torch.autograd.backward = self.original


class NodeSampling:
    """The node-norm half of ``Watch`` (see the module docstring)."""

    def _init_sampling(self) -> None:
        """Sampling state; needs ``stats``, ``capture_modules`` set."""
        self._sampler = NodeNormSampler(named_parameters=list(zip(self.stats.names, self.stats.params)))
        self._param_ids = {id(p): n for n, p in zip(self.stats.names, self.stats.params)}
        self._tap: _BackwardTap | None = None           # built at the first arming; .armed says if it waits
        self._capture = None
        self._capture_live = False
        self._node_result: tuple[int, bytes] | None = None
        self._graphs: dict[str, tuple[int, list[str], bool]] = {}    # hash -> (graph id, node ids, has modules)
        self._hash_cache: dict[tuple, str] = {}
        self._plans: dict[str, object] = {}                               # hash -> nodenorms.HookPlan
        self._needs_capture = self.capture_modules
        self._fwd_handles: list = []                      # forward hooks for module capture only
        self.graph_error: str | None = None
        self.node_error: str | None = None
        # the native accelerator (gradviz.core.native): C++ walk, structure key and norm hooks
        # for structures already seen (the Python path below learns each new one first)
        from gradviz.core import native

        module = native.get()
        self._native = module.NodeNorms(self.stats.params) if module is not None else None
        self._native_entries: dict[int, tuple] = {}        # native structure key -> graph entry

    def _arm_sampling(self, on: bool) -> None:
        """Before a sampled step (``on``): arm the backward tap now, and, while the graph has no
        module paths yet, forward hooks that capture them. Otherwise: remove those hooks.

        The tap intercepts only the backward call, so it costs nothing during the forward and
        can be armed from ``w.step`` (no hook on the model, whose hooks would push
        ``Module.__call__`` onto its slow path). (Changed between steps, never from inside a
        hook: the module iterates its hook dicts then.)"""
        on = on and bool(self.every) and not self._closed
        if not on:
            if self._fwd_handles:
                for h in self._fwd_handles:
                    h.remove()
                self._fwd_handles = []
            return
        if self._tap is None:
            self._tap = _BackwardTap(self)
        self._tap.arm()
        if self._needs_capture and not self._fwd_handles:
            self._fwd_handles.append(self.module.register_forward_pre_hook(self._forward_pre))
            self._fwd_handles.append(self.module.register_forward_hook(self._forward_post, always_call=True))

    def _forward_pre(self, module, args) -> None:
        if (self._needs_capture and self._capture is None and self._tap is not None and self._tap.armed
                and torch.is_grad_enabled()):
            from gradviz.core.capture import ForwardCapture
            cap = ForwardCapture(self.module)
            try:
                cap.__enter__()
                self._capture = cap
                self._capture_live = True
            except Exception:
                self._capture = None

    def _forward_post(self, module, args, output) -> None:
        if self._capture_live:
            self._capture_live = False
            try:
                self._capture.__exit__(None, None, None)
            except Exception:
                self._capture = None

    def _drop_tap(self) -> None:
        self._capture = None
        if self._tap is not None:
            self._tap.close()

    def _sampled_backward(self, func, args, kwargs):
        """``Tensor.backward`` of a sampled step: hooks every node, then runs it."""
        root = args[0] if args else kwargs.get("tensors")
        if isinstance(root, (tuple, list)) and len(root) == 1:
            root = root[0]
        if not isinstance(root, torch.Tensor) or root.grad_fn is None or self._closed:
            return func(*args, **kwargs)
        fast, key, n_nodes = self._native, None, -1
        if fast is not None:
            try:
                key, n_nodes, armed = fast.begin(root)      # hooks placed at once for a known key
            except Exception as exc:                     # never break the user's backward
                self.graph_error = f"native: {type(exc).__name__}: {exc}"
                fast = self._native = None
            else:
                if armed:
                    self._capture = None
                    self._sampler.last_n_nodes = n_nodes
                    try:
                        func(*args, **kwargs)
                    finally:
                        values = fast.finish(NO_VALUE)   # (backward errors propagate)
                    entry = self._native_entries[key]
                    self._node_result = (entry[0], entry[3], values)
                    return None
                fast.cancel()
        nodes, edges = walk([root.grad_fn])          # one walk: structure hash and hooks
        params_in = self._skip_params(nodes)
        if self.param_names and not any(params_in):
            # none of this model's parameters in the graph: another model's backward (a second
            # watch, an auxiliary net). Let it through and wait for ours.
            del nodes, edges
            try:
                return func(*args, **kwargs)
            finally:
                if self._tap is not None and not self._closed:
                    self._tap.arm()
        entry = plan = None
        try:
            entry, digest = self._structure(root, nodes, edges)
            plan = self._plans.get(digest)
            if plan is None:
                if len(self._plans) > 64:
                    self._plans.clear()
                plan = self._plans[digest] = hook_plan(nodes, edges, params_in)
        except Exception as exc:                         # never break the user's backward
            self.graph_error = f"{type(exc).__name__}: {exc}"
        self._capture = None
        skip = None if plan is not None else params_in
        del edges

        def backward():
            return func(*args, **kwargs)

        self._sampler.last_n_nodes = len(nodes)
        try:
            values = self._sampler.hooked_backward(nodes, backward, skip, missing=NO_VALUE, plan=plan)
        finally:                                         # (backward errors propagate)
            del nodes
        if entry is not None:
            self._node_result = (entry[0], entry[3], values)
            # a structure the native path may take from now on: once its graph is final (with
            # module paths, or none will come)
            if fast is not None and len(values) == n_nodes and (entry[2] or not self._needs_capture):
                if len(self._native_entries) > 64:
                    self._native_entries.clear()
                    fast.forget()
                self._native_entries[key] = entry
                fast.learn(key)
        return None

    def _skip_params(self, nodes: list) -> list[bool]:
        """Parameters are not hooked: their norms come from the step row (StepStats)."""
        pid = self._param_ids
        return [hasattr(fn, "variable") and id(fn.variable) in pid for fn in nodes]

    def _structure(self, root: torch.Tensor, nodes: list, edges: list) -> tuple[tuple, str]:
        """``((graph id, node ids of the stored graph, has modules, selector), structure hash)``.

        The selector maps each stored node id to where its norm comes from: an index into
        ``concat(walk-order node norms, [1.0 for the loss], param grad norms, [NO_VALUE])``."""
        # structure key: node types in walk order, the parameter behind each leaf, edges by
        # position; built with C-level maps (this runs on every sampled step: ~700 nodes on GPT-12)
        pid = self._param_ids
        types = tuple(map(type, nodes))
        position = dict(zip(nodes, range(len(nodes)))).__getitem__
        leaves = [i for i, t in enumerate(types) if t is _ACCUMULATE_GRAD]
        key = (types, tuple(leaves), tuple([pid.get(id(nodes[i].variable), "") for i in leaves]),
               tuple(map(position, map(_producer, edges))), tuple(map(position, map(_consumer, edges))),
               tuple(map(_output_nr, edges)))
        digest = self._hash_cache.get(key)
        if digest is None:
            h = hashlib.blake2b(digest_size=16)
            h.update("\x00".join(fn.name() for fn in nodes).encode())
            h.update(np.array(key[1], dtype=np.int64).tobytes())
            h.update("\x00".join(key[2]).encode())
            h.update(np.array(key[3:], dtype=np.int64).tobytes())
            digest = h.hexdigest()
            if len(self._hash_cache) > 64:
                self._hash_cache.clear()
            self._hash_cache[key] = digest
        del position
        known = self._graphs.get(digest)
        cap = self._capture
        if known is not None and (known[2] or cap is None):
            return known, digest
        ids = node_ids_for(nodes, self._param_ids, {})
        if not self.record_graph:
            node_list = ids + ["loss"]
            entry = (0, node_list, True, self._selector(ids, node_list))
            self._graphs[digest] = entry
            return entry, digest
        from gradviz.core.record.reader import graph_to_json
        from gradviz.core.modules import module_table
        from gradviz.core.trace import TraceOptions, add_param_node, build_graph

        g, _ = build_graph([root], self.module, cap, {}, TraceOptions(saved_tensors=True, capture_forward=False))
        for name, p in zip(self.stats.names, self.stats.params):
            g.nodes[add_param_node(g, name, p)]["requires_grad"] = True
        g.graph["modules"] = module_table(self.module, g)
        g.graph.update(step=self._step, script=None, device=str(root.device), loss=None)
        node_list = list(g.nodes)
        text = graph_to_json(g)
        if known is not None:                       # same structure, now with module paths
            self._writer.update_graph(known[0], text)
            entry = (known[0], known[1], True, known[3])
        else:
            gid = self._writer.add_graph(self._step, digest, node_list, text)
            entry = (gid, node_list, cap is not None, self._selector(ids, node_list))
        self._graphs[digest] = entry
        self._needs_capture = self.capture_modules and not entry[2]
        return entry, digest

    def _selector(self, ids: list[str], node_list: list[str]) -> np.ndarray:
        n_walk, n_par = len(ids), len(self.param_names)
        where = {nid: k for k, nid in enumerate(ids) if not nid.startswith("param:")}
        where["loss"] = n_walk
        for j, name in enumerate(self.param_names):
            where[f"param:{name}"] = n_walk + 1 + j
        missing = n_walk + 1 + n_par
        return np.array([where.get(nid, missing) for nid in node_list], dtype=np.intp)
