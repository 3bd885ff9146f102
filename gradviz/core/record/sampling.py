"""Per-node gradient norms of ``watch``'s sampled steps (``NodeRecording``, one per watch).

See "How node norms are taken" in ``gradviz.core.record.recorder``. The watch owns one
``NodeRecording`` and calls it at three points of its step: ``disarm`` (a step ended),
``arm`` (the next step is sampled: wait for its backward through ``gradviz.core.record.tap``)
and ``take`` (the sampled step's norms, for its row). The tap calls ``sampled_backward``
with the loss: the graph is walked and keyed, a new structure stored in the run file (with
the module paths captured by forward hooks on the first sampled step), and the backward run
under the hooks of a ``hook_plan`` cached per structure, or of the native accelerator for a
structure seen before.
"""
from __future__ import annotations

import hashlib
import logging
import operator
from typing import Any, Callable

import numpy as np
import torch

from gradviz.core.trace.nodenorms import NodeNormSampler, hook_plan, node_ids_for
from gradviz.core.record.schema import NO_VALUE
from gradviz.core.record.tap import BackwardTap
from gradviz.core.record.writer import RunWriter
from gradviz.core.stats.sharding import any_dtensor, unsharded_aliases
from gradviz.core.stats.steps import StepStats
from gradviz.core.trace.walk import walk

log = logging.getLogger(__name__)

__all__ = ["NodeRecording"]

_ACCUMULATE_GRAD = torch._C._functions.AccumulateGrad       # the node type of a leaf (a parameter)
_producer, _consumer, _output_nr = (operator.itemgetter(i) for i in range(3))


class NodeRecording:
    """Per-node gradient norms of a watch's sampled steps (see the module docstring).

    The watch calls ``arm(step, sampled)`` from ``w.step`` (before the next step),
    ``disarm()`` at the start of each ``w.step`` and ``take()`` for the step's result
    ``(graph id, selector, walk-order norms)`` or None."""

    def __init__(self, module: torch.nn.Module, stats: StepStats, writer: RunWriter, *, every: int,
                 record_graph: bool, capture_modules: bool) -> None:
        self.module = module
        self.every = every
        self.record_graph = record_graph
        self.capture_modules = capture_modules
        self.writer = writer
        self.step = 0                                    # the step the next backward belongs to
        self.closed = False
        self.graph_error: str | None = None              # why a graph could not be stored (the step still is)
        self.before_backward = None                      # a weak method the watch sets (model_follow)
        self._tap = BackwardTap(self)
        self._capture = None
        self._capture_live = False
        self._result: tuple | None = None
        self._graphs: dict[str, tuple[int, list[str], bool, np.ndarray]] = {}   # hash -> graph entry
        self._hash_cache: dict[tuple, str] = {}
        self._plans: dict[str, object] = {}               # hash -> nodenorms.HookPlan
        self._needs_capture = capture_modules
        self._fwd_handles: list = []                      # forward hooks for module capture only
        self._ended: list = []                            # captures ended in a hook, their hooks still on
        self._native_key: tuple[int, int] | None = None    # (key, node count) of a structure to learn
        self.follow(stats)

    def follow(self, stats: StepStats) -> None:
        """Measure the parameters of ``stats`` from now on (all of them at the start; those of a
        model that changed under the watch later: every cache keyed by the old ones is dropped)."""
        self.names = stats.names
        self.params = stats.params
        self._sampler = NodeNormSampler(named_parameters=list(zip(self.names, self.params)))
        self._param_ids = {id(p): n for n, p in zip(self.names, self.params)}
        self._graphs.clear()
        self._hash_cache.clear()
        self._plans.clear()
        # the native accelerator (gradviz.core.native): C++ walk, structure key and norm hooks
        # for structures already seen (the Python path below learns each new one first)
        from gradviz.core import native

        module_native = native.get()
        # sharded (DTensor) parameters: the C++ hooks cannot reduce DTensor gradients, and FSDP2's
        # graph leaves are its unsharded parameters (named by sharding.unsharded_aliases at each sample)
        self.sharded = any_dtensor(self.params)
        self.native = (module_native.NodeNorms(self.params)
                       if module_native is not None and not self.sharded else None)
        self._native_entries: dict[int, tuple] = {}        # native structure key -> graph entry

    # -- the watch's calls ------------------------------------------------
    @property
    def pending(self) -> bool:
        """Armed, or forward hooks placed: ``disarm`` has something to undo."""
        return self._tap.pending or self._capture is not None or bool(self._fwd_handles)

    def arm(self, step: int, sampled: bool) -> None:
        """Before step ``step``: when ``sampled``, wait for its backward (the tap) and, while the
        graph has no module paths yet, add forward hooks that capture them; otherwise remove
        those hooks. (Changed between steps, never from inside a hook: the module iterates its
        hook dicts then.) Nothing else is hooked on the model: its hooks would push
        ``Module.__call__`` onto its slow path."""
        self.step = step
        self._drop_ended()
        sampled = sampled and bool(self.every) and not self.closed
        if not sampled:
            self._remove_forward_hooks()
            return
        self._tap.arm()
        if self._needs_capture and not self._fwd_handles:
            self._fwd_handles.append(self.module.register_forward_pre_hook(self._forward_pre))
            self._fwd_handles.append(self.module.register_forward_hook(self._forward_post, always_call=True))

    def disarm(self) -> None:
        """The step ended: stop waiting for its backward."""
        self._drop_ended()
        self._capture = None
        self._tap.disarm()

    def take(self) -> tuple | None:
        """The last sampled backward's result (once), or None."""
        result, self._result = self._result, None
        return result

    def close(self) -> None:
        self.closed = True
        self.disarm()
        self._remove_forward_hooks()

    def _remove_forward_hooks(self) -> None:
        self._drop_ended()
        for h in self._fwd_handles:
            h.remove()
        self._fwd_handles = []

    # -- module capture (first sampled steps only) -------------------------
    def _forward_pre(self, module, args) -> None:
        if self._needs_capture and self._capture is None and self._tap.waiting and torch.is_grad_enabled():
            from gradviz.core.trace.capture import ForwardCapture
            cap = ForwardCapture(self.module)
            try:
                cap.__enter__()
            except Exception:                     # the graph is then stored without module paths
                log.debug("module capture could not start", exc_info=True)
                return
            self._capture = cap
            self._capture_live = True

    def _forward_post(self, module, args, output) -> None:
        if self._capture_live:
            self._capture_live = False
            self._ended.append(self._capture)      # its hooks are removed between steps (end_in_hook)
            try:
                self._capture.end_in_hook()
            except Exception:
                log.debug("module capture could not end", exc_info=True)
                self._capture = None

    def _drop_ended(self) -> None:
        """Remove the module hooks of captures ended inside a forward (called between steps)."""
        ended, self._ended = self._ended, []
        for cap in ended:
            cap.remove_hooks()

    # -- the sampled backward (called by the tap) ----------------------------
    def sampled_backward(self, root: Any, run: Callable[[], None]) -> None:
        """The tap's call for this thread's next backward: hooks every node when the graph
        holds our parameters, then runs it (see ``tap.TapOwner``)."""
        self._native_key = None
        if self.before_backward is not None:
            follow = self.before_backward()
            if follow is not None:
                follow()
        if not isinstance(root, torch.Tensor) or root.grad_fn is None or self.closed:
            run()                                    # not a loss we can walk: keep waiting
            return
        if self.native is not None and self._native_backward(root, run):
            return
        if self.sharded:                             # FSDP2's unsharded parameters exist from the first forward
            self._param_ids = {**{id(p): n for n, p in zip(self.names, self.params)},
                               **unsharded_aliases(self.module)}
        nodes, edges = walk([root.grad_fn])          # one walk: structure hash and hooks
        params_in = self._skip_params(nodes)
        if self.names and not any(params_in):
            # none of this model's parameters in the graph: another model's backward (a second
            # watch, an auxiliary net). Let it through and wait for ours.
            del nodes, edges
            run()
            return
        self._tap.disarm()
        entry = plan = digest = None
        try:
            entry, digest = self._structure(root, nodes, edges)
            plan = self._plans.get(digest)
            if plan is None:
                if len(self._plans) > 64:
                    self._plans.clear()
                plan = self._plans[digest] = hook_plan(nodes, edges, params_in)
        except Exception as exc:                     # never break the user's backward
            self.graph_error = f"{type(exc).__name__}: {exc}"
            log.warning("gradviz.watch: the graph of step %d could not be stored (%s)", self.step, self.graph_error,
                        exc_info=True)
        self._capture = None
        del edges
        self._sampler.last_n_nodes = len(nodes)
        try:
            values = self._sampler.hooked_backward(nodes, run, None if plan is not None else params_in,
                                                   missing=NO_VALUE, plan=plan)
        finally:                                     # (backward errors propagate)
            del nodes
        if entry is not None:
            self._result = (entry[0], entry[3], values)
            self._learn_native(entry, len(values))

    def _native_backward(self, root: torch.Tensor, run: Callable[[], None]) -> bool:
        """A structure seen before, walked, keyed and hooked in C++; False: the Python path."""
        fast = self.native
        try:
            key, n_nodes, armed = fast.begin(root)      # hooks placed at once for a known key
        except Exception as exc:                     # never break the user's backward
            self.graph_error = f"native: {type(exc).__name__}: {exc}"
            log.warning("gradviz.watch: native node norms failed (%s); using the Python path", exc, exc_info=True)
            self.native = None
            return False
        if not armed:
            fast.cancel()
            self._native_key = (key, n_nodes)            # learnt after the Python path's run
            return False
        self._tap.disarm()
        self._capture = None
        self._sampler.last_n_nodes = n_nodes
        try:
            run()
        finally:
            values = fast.finish(NO_VALUE)           # (backward errors propagate)
        entry = self._native_entries[key]
        self._result = (entry[0], entry[3], values)
        return True

    def _learn_native(self, entry: tuple, n_values: int) -> None:
        """Let the native path take this structure from now on, once its graph is final (with
        module paths, or none will come)."""
        fast, seen = self.native, self._native_key
        if fast is None or seen is None or seen[1] != n_values or not (entry[2] or not self._needs_capture):
            return
        key = seen[0]
        if len(self._native_entries) > 64:
            self._native_entries.clear()
            fast.forget()
        self._native_entries[key] = entry
        fast.learn(key)

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
        from gradviz.core.trace.modules import module_table
        from gradviz.core.trace.graph_build import add_param_node, build_graph
        from gradviz.core.trace.options import TraceOptions

        g, _ = build_graph([root], self.module, cap, {}, TraceOptions(saved_tensors=True, capture_forward=False))
        for name, p in zip(self.names, self.params):
            g.nodes[add_param_node(g, name, p)]["requires_grad"] = True
        g.graph["modules"] = module_table(self.module, g)
        g.graph.update(step=self.step, script=None, device=str(root.device), loss=None)
        node_list = list(g.nodes)
        text = graph_to_json(g)
        if known is not None:                       # same structure, now with module paths
            self.writer.update_graph(known[0], text)
            entry = (known[0], known[1], True, known[3])
        else:
            gid = self.writer.add_graph(self.step, digest, node_list, text)
            entry = (gid, node_list, cap is not None, self._selector(ids, node_list))
        self._graphs[digest] = entry
        self._needs_capture = self.capture_modules and not entry[2]
        return entry, digest

    def _selector(self, ids: list[str], node_list: list[str]) -> np.ndarray:
        n_walk, n_par = len(ids), len(self.names)
        where = {nid: k for k, nid in enumerate(ids) if not nid.startswith("param:")}
        where["loss"] = n_walk
        for j, name in enumerate(self.names):
            where[f"param:{name}"] = n_walk + 1 + j
        missing = n_walk + 1 + n_par
        return np.array([where.get(nid, missing) for nid in node_list], dtype=np.intp)
