"""``watch``: record any training loop into a run file.

    with gradviz.watch(model, "runs/exp.gvrun", every=10, optimizer=opt) as w:
        for x, y in data:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            w.step(loss)            # before or after opt.step(): both work (see below)
            opt.step()

What is recorded, per step (one row per ``w.step`` call):

* ``loss`` (the value of the tensor or float given), wall-clock ``time``;
* per-parameter gradient norms (``p.grad.norm()``; "no gradient" when ``p.grad`` is
  None) and their global norm, read by ``w.step`` (or by the optimizer's step
  pre-hook, whichever comes first in the step) -- i.e. after backward returned,
  so under DistributedDataParallel after the all-reduce;
* with ``optimizer=``: the learning rate of its first param group and the update
  ratios ``||theta_after - theta_before|| / ||theta_before||`` per parameter (and
  globally). They come from ``register_step_pre_hook`` / ``register_step_post_hook``
  on the optimizer: theta is snapshot when the gradients are read, the update is
  measured when ``optimizer.step()`` returns, and attached to the step whose
  gradients the optimizer consumed. So ``w.step(loss); opt.step()`` and
  ``opt.step(); w.step(loss)`` record the same thing. A step whose optimizer step
  never ran (gradient accumulation, a GradScaler skip) has no update ratios.
  Cadence: ``update_ratio_every=N`` measures them every N steps; the default
  (None) measures every step for the first 10 steps, then as often as keeps their
  cost (a copy of the weights and two passes over them) under 2 % of the step time,
  re-planned every 50 steps: on small, fast models that is every few steps. Steps
  not measured have no update ratios (like a step without an optimizer step).
* every ``every`` steps (steps 0, every, 2*every, ...): the gradient norm at every
  node of the autograd graph, with the node ids of ``gradviz.core.trace``; and the
  graph structure itself (JSON) the first time and whenever its structure hash
  changes.

How node norms are taken with only ``w.step(loss)`` after backward: node hooks
must be in place before backward runs. A forward hook on the model, on a step that
will be sampled, pushes a tiny ``TorchFunctionMode`` that lets every call through
until it sees ``Tensor.backward`` (``loss.backward()``): there, before the backward
runs, it walks the loss's graph, hashes its structure, stores the structure if
new, and runs that backward under ``gradviz.core.nodenorms.NodeNormSampler``'s
prehooks. The mode is removed at the next ``w.step``. Consequences: node norms
need the model to be called (``model(x)``, not ``model.forward(x)``) and the
backward to be ``tensor.backward()`` (not ``torch.autograd.backward/grad``); a
sampled step that misses either simply has no node norms. Nothing keeps the
autograd graph alive after the step.

Files: SQLite, see ``gradviz.core.record.schema``. Under ``torch.distributed``
(world size > 1) each rank writes its own file: ``run.gvrun`` -> ``run.rank0.gvrun``,
``run.rank1.gvrun`` ... (or format ``{rank}`` in the path), with rank and world size
in the meta table. Errors writing the file raise ``RecordError`` from the
constructor (bad path) or from ``w.step`` (disk full), never silently later.
"""
from __future__ import annotations

import atexit
import hashlib
import math
import os
import socket
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz.core.nodenorms import NodeNormSampler, node_ids_for
from gradviz.core.record.schema import NO_VALUE, SCHEMA_VERSION, RecordError, rank_path, real
from gradviz.core.record.writer import RunWriter
from gradviz.core.stepstats import StepStats, rows_from_raw
from gradviz.core.walk import walk

__all__ = ["watch", "Watch", "unwrap_model", "dist_info"]

_ONE = np.ones(1)
_MISSING = np.full(1, NO_VALUE)
UPDATE_BUDGET = 0.02         # auto update-ratio cadence: at most this fraction of the step time


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DistributedDataParallel / DataParallel / torch.compile wrappers."""
    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        inner = getattr(model, "module", None)
        if isinstance(inner, nn.Module) and type(model).__name__ in ("DistributedDataParallel", "DataParallel",
                                                                       "FullyShardedDataParallel"):
            model = inner
            continue
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
    return model


def dist_info() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return 0, 1


class _BackwardTap(TorchFunctionMode):
    """Pass-through mode that hands the first ``Tensor.backward`` call to ``watch``."""

    def __init__(self, owner: "Watch") -> None:
        super().__init__()
        self._owner = weakref.ref(owner)
        self.armed = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if self.armed and func is torch.Tensor.backward:
            self.armed = False
            owner = self._owner()
            if owner is not None:
                return owner._sampled_backward(func, args, kwargs)
        return func(*args, **kwargs)


class Watch:
    """Records a training loop; see the module docstring. Use as a context manager or call ``close()``."""

    def __init__(self, model: nn.Module, path: str | os.PathLike, every: int | None = 10,
                 optimizer: torch.optim.Optimizer | None = None, *, graph: bool = True,
                 capture_modules: bool = True, overwrite: bool = True, commit_every: int = 50,
                 commit_seconds: float = 0.5, rank: int | None = None, world_size: int | None = None,
                 update_ratio_every: int | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch() needs an nn.Module, got {type(model).__name__}")
        self.model = model
        self.module = unwrap_model(model)
        self.every = int(every) if every else 0
        self.optimizer = optimizer
        self.record_graph = graph
        self.capture_modules = capture_modules
        drank, dworld = dist_info()
        self.rank = drank if rank is None else int(rank)
        self.world_size = dworld if world_size is None else int(world_size)
        self.path = rank_path(path, self.rank, self.world_size)

        self.stats = StepStats(self.module.named_parameters(), track_updates=optimizer is not None)
        self.param_names = list(self.stats.names)
        self._sampler = NodeNormSampler(named_parameters=list(zip(self.stats.names, self.stats.params)))
        self._param_ids = {id(p): n for n, p in zip(self.stats.names, self.stats.params)}
        import gradviz

        meta = {
            "format": SCHEMA_VERSION, "gradviz_version": gradviz.__version__, "torch_version": torch.__version__,
            "created": time.time(), "model_class": f"{type(self.module).__module__}.{type(self.module).__qualname__}",
            "wrapper": type(model).__name__ if model is not self.module else None,
            "param_names": self.param_names, "param_shapes": [list(p.shape) for p in self.stats.params],
            "param_numel": [int(p.numel()) for p in self.stats.params], "rank": self.rank,
            "world_size": self.world_size, "hostname": socket.gethostname(), "pid": os.getpid(),
            "every": self.every, "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "device": str(self.stats.device), "argv": list(sys.argv), "status": "running",
        }
        self._writer = RunWriter(self.path, meta, overwrite=overwrite, commit_every=commit_every,
                                 commit_seconds=commit_seconds)

        self._step = 0                        # index the next w.step gets
        # rows of the steps since the last commit, converted to arrays in one go when committing
        self._rows: list[tuple] = []
        self._commit_every = max(1, int(commit_every))
        self._commit_seconds = float(commit_seconds)
        self._last_flush = time.monotonic()
        self._on_cpu = self.stats.device.type == "cpu"
        # update-ratio cadence (see the module docstring): None = auto
        self.update_ratio_every = update_ratio_every
        self._upd_every = 1
        self._upd_cost = 0.0                  # EMA: seconds the update ratios cost (x3, see _opt_post)
        self._step_cost = 0.0                 # EMA: seconds between steps
        self._t_prev: float | None = None
        self._upd_now = False
        self._closed = False
        self._lock = threading.RLock()
        # per-step state machine (see module docstring)
        self._grads_read = False              # grads of the current step already read (w.step or pre-hook)
        self._awaiting_update = False         # w.step done, optimizer step expected
        self._updated = False                 # optimizer step done for the current step
        self._open_loss: Any = None
        self._open_step: int | None = None
        self._lr: float | None = None
        self._t_open = time.time()
        # node norms
        self._tap: _BackwardTap | None = None
        self._capture = None
        self._capture_live = False
        self._node_result: tuple[int, bytes] | None = None
        self._graphs: dict[str, tuple[int, list[str], bool]] = {}    # hash -> (graph id, node ids, has modules)
        self._hash_cache: dict[tuple, str] = {}
        self._needs_capture = capture_modules
        self.graph_error: str | None = None
        self.node_error: str | None = None

        self._handles: list[Any] = []
        if self.every:
            if capture_modules:
                self._handles.append(self.module.register_forward_pre_hook(self._forward_pre))
            self._handles.append(self.module.register_forward_hook(self._forward_post, always_call=True))
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._opt_pre))
            self._handles.append(optimizer.register_step_post_hook(self._opt_post))
        self._writer.before_commit = weakref.WeakMethod(self._drain)
        self._finalizer = weakref.finalize(self, _close_writer, self._writer)
        atexit.register(self._finalizer)

    # -- public -----------------------------------------------------------
    @property
    def committed_step(self) -> int | None:
        """The last step durably written (visible to readers, survives a SIGKILL)."""
        return self._writer.committed_step

    @property
    def n_steps(self) -> int:
        return self._step

    def step(self, loss: Any = None, *, step: int | None = None) -> int:
        """Record the step whose backward just ran; returns its step number."""
        if self._closed:
            raise RecordError("this watch is closed", self.path)
        self._drop_tap()
        if self._open_step is not None and not self._updated:
            # previous step still open: its optimizer step never came (or w.step twice)
            self._finish_open()
        s = self._step if step is None else int(step)
        self._step = s + 1
        if not self._grads_read:
            self._read_grads()
        if isinstance(loss, torch.Tensor):
            loss = loss.item() if (self._on_cpu and loss.device.type == "cpu" and loss.numel() == 1) else loss.detach()
        self._open_loss = loss
        self._open_step = s
        if self.optimizer is None or self._updated:
            self._finish_open()
        else:
            self._awaiting_update = True
        if len(self._rows) >= self._commit_every or time.monotonic() - self._last_flush >= self._commit_seconds:
            self._flush()
        return s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._drop_tap()
            if self._open_step is not None:
                self._finish_open()
            self._flush()
            for h in self._handles:
                h.remove()
            self._handles.clear()
            self._writer.set_meta("status", "closed")
            self._writer.set_meta("steps", self._step)
        finally:
            self._writer.close()
            self._finalizer.detach()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- optimizer hooks ----------------------------------------------------
    def _opt_pre(self, optimizer, args, kwargs) -> None:
        if self._closed:
            return
        self._lr = _lr_of(optimizer)
        if self._open_step is not None and self._awaiting_update:
            return                                      # w.step came first: grads read, theta snapshot
        if self._grads_read and self._updated:
            # order "opt.step(); w.step()" but w.step never came for the last step
            self._finish_open(step=self._step)
            self._step += 1
        if not self._grads_read:
            self._read_grads()

    def _read_grads(self) -> None:
        """Gradient norms of the step (and the theta snapshot when update ratios are due)."""
        now = time.perf_counter()
        if self._t_prev is not None:
            dt = now - self._t_prev
            self._step_cost = dt if not self._step_cost else 0.9 * self._step_cost + 0.1 * dt
        self._t_prev = now
        self._upd_now = upd = self.optimizer is not None and self._updates_due(self._step)
        self.stats.begin()
        self.stats.grads_ready(updates=upd)
        self._grads_read = True

    def _updates_due(self, s: int) -> bool:
        every = self.update_ratio_every
        if every is None:
            if s >= 10 and s % 50 == 10 and self._step_cost > 0:        # (re-)plan now and then
                self._upd_every = max(1, math.ceil(self._upd_cost / (UPDATE_BUDGET * self._step_cost)))
            every = self._upd_every
        return every > 0 and s % every == 0

    def _opt_post(self, optimizer, args, kwargs) -> None:
        if self._closed or not self._grads_read:
            return
        if self._upd_now:
            t0 = time.perf_counter()
            self.stats.after_update()
            # the snapshot in grads_ready costs about what after_update does, and the extra memory
            # traffic slows the next kernels about as much again: count 3x (as the Trainer does)
            spent = 3 * (time.perf_counter() - t0)
            self._upd_cost = spent if not self._upd_cost else 0.9 * self._upd_cost + 0.1 * spent
        self._updated = True
        if self._awaiting_update:
            self._finish_open()

    # -- rows ---------------------------------------------------------------
    def _finish_open(self, step: int | None = None) -> None:
        s = self._open_step if step is None else step
        if s is None:
            s = self._step
        if not self._grads_read:
            self._read_grads()
        node = self._node_result
        self._node_result = None
        lr = self._lr if self._lr is not None else _lr_of(self.optimizer)
        self._rows.append((s, time.time(), self._open_loss, lr, self.stats.raw(),
                           self._updated and self._upd_now, node))
        self._open_step = None
        self._open_loss = None
        self._grads_read = False
        self._awaiting_update = False
        self._updated = False
        self._lr = None

    def _flush(self) -> None:
        """Convert the buffered rows (one numpy pass) and commit them in one transaction."""
        self._writer.commit()            # calls _drain first

    def _drain(self) -> None:
        """Hand the buffered rows to the writer (converted in one numpy pass), without committing."""
        self._last_flush = time.monotonic()
        rows, self._rows = self._rows, []
        if not rows:
            return
        arr = rows_from_raw([r[4] for r in rows], len(self.param_names))
        losses = _losses([r[2] for r in rows])
        has = arr["has_grad"]
        grad_blobs = np.where(has, arr["param_norms"], NO_VALUE).astype("<f4")
        ratio_blobs = arr["update_ratios"].astype("<f4")
        deltas, weights = arr["update_norms"], arr["weight_norms"]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            num = np.sum(deltas * deltas, axis=1)
            den = np.sum(weights * weights, axis=1)
            global_ratio = np.sqrt(num / den)
        global_ratio = np.where(den > 0, global_ratio, np.where(num == 0, 0.0, np.inf))
        global_ratio = np.where(np.isnan(num) | np.isnan(den), np.nan, global_ratio)
        grad_norm = arr["grad_norm"].tolist()
        out = []
        for i, (s, t, _, lr, _, updated, node) in enumerate(rows):
            if node is not None:
                gid, sel, values = node
                full = np.concatenate([values, _ONE, np.where(has[i], arr["param_norms"][i], NO_VALUE), _MISSING])
                picked = full[sel]
                self._writer.add_node_norms(s, gid, picked.astype("<f4").tobytes())
            out.append((int(s), float(t), real(losses[i]), real(grad_norm[i]), real(lr),
                        real(float(global_ratio[i])) if updated else None, grad_blobs[i].tobytes(),
                        ratio_blobs[i].tobytes() if updated else None, int(node is not None)))
        self._writer.add_step_rows(out)

    # -- node norms -----------------------------------------------------------
    def _sampled_next(self) -> bool:
        return bool(self.every) and not self._closed and self._step % self.every == 0

    def _forward_pre(self, module, args) -> None:
        if (self._needs_capture and self._capture is None and self._tap is None and torch.is_grad_enabled()
                and self._sampled_next()):
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
        if self._tap is None and torch.is_grad_enabled() and self._sampled_next():
            tap = _BackwardTap(self)
            tap.__enter__()
            self._tap = tap

    def _drop_tap(self) -> None:
        tap, self._tap = self._tap, None
        self._capture = None
        if tap is None:
            return
        tap.armed = False
        n = torch._C._len_torch_function_stack()
        if n and torch._C._get_function_stack_at(n - 1) is tap:
            tap.__exit__(None, None, None)
        # else: another mode was pushed above it; it stays disarmed (a pass-through) until popped

    def _sampled_backward(self, func, args, kwargs):
        """``Tensor.backward`` of a sampled step: hooks every node, then runs it."""
        root = args[0] if args else kwargs.get("self")
        if not isinstance(root, torch.Tensor) or root.grad_fn is None or self._closed:
            return func(*args, **kwargs)
        nodes, edges = walk([root.grad_fn])          # one walk: structure hash and hooks
        entry = None
        try:
            entry = self._structure(root, nodes, edges)
        except Exception as exc:                         # never break the user's backward
            self.graph_error = f"{type(exc).__name__}: {exc}"
        self._capture = None
        del edges

        def backward():
            return func(*args, **kwargs)

        # parameters: their norms come from the step row (StepStats), not a second pass here
        skip = [hasattr(fn, "variable") and id(fn.variable) in self._param_ids for fn in nodes]
        self._sampler.last_n_nodes = len(nodes)
        try:
            values = self._sampler.hooked_backward(nodes, backward, skip, missing=NO_VALUE)   # backward errors propagate
        finally:
            del nodes
        if entry is not None:
            self._node_result = (entry[0], entry[3], values)
        return None

    def _structure(self, root: torch.Tensor, nodes: list, edges: list) -> tuple | None:
        """(graph id, node ids of the stored graph, has modules, selector) of this graph's structure.

        The selector maps each stored node id to where its norm comes from: an index into
        ``concat(walk-order node norms, [1.0 for the loss], param grad norms, [NO_VALUE])``."""
        # structure key: node types in walk order, the parameter behind each leaf, edges by position
        pid = self._param_ids
        index = {fn: i for i, fn in enumerate(nodes)}
        key = (tuple(map(type, nodes)),
               tuple(pid.get(id(fn.variable), "") if hasattr(fn, "variable") else "" for fn in nodes),
               tuple([(index[a], index[b], nr) for a, b, nr in edges]))
        digest = self._hash_cache.get(key)
        if digest is None:
            h = hashlib.blake2b(digest_size=16)
            h.update("\x00".join(fn.name() for fn in nodes).encode())
            h.update("\x00".join(key[1]).encode())
            h.update(np.array(key[2], dtype=np.int64).tobytes())
            digest = h.hexdigest()
            if len(self._hash_cache) > 64:
                self._hash_cache.clear()
            self._hash_cache[key] = digest
        del index
        known = self._graphs.get(digest)
        cap = self._capture
        if known is not None and (known[2] or cap is None):
            return known
        ids = node_ids_for(nodes, self._param_ids, {})
        if not self.record_graph:
            node_list = ids + ["loss"]
            entry = (0, node_list, True, self._selector(ids, node_list))
            self._graphs[digest] = entry
            return entry
        from gradviz.core.record.reader import graph_to_json
        from gradviz.core.trace import TraceOptions, build_graph, _finish_modules

        g, _ = build_graph([root], self.module, cap, {}, TraceOptions(saved_tensors=True, capture_forward=False))
        for name, p in zip(self.stats.names, self.stats.params):
            nid = f"param:{name}"
            if nid not in g:
                g.add_node(nid, kind="param", param=name, label=name, op="", shape=list(p.shape),
                           dtype=str(p.dtype).replace("torch.", ""), device=str(p.device), outputs=[],
                           module=name.rpartition(".")[0], module_type="", location="", code="", call="",
                           saved=[], custom=None, reachable=False)
            g.nodes[nid]["requires_grad"] = True
        _finish_modules(g, self.module)
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
        return entry

    def _selector(self, ids: list[str], node_list: list[str]) -> np.ndarray:
        n_walk, n_par = len(ids), len(self.param_names)
        where = {nid: k for k, nid in enumerate(ids) if not nid.startswith("param:")}
        where["loss"] = n_walk
        for j, name in enumerate(self.param_names):
            where[f"param:{name}"] = n_walk + 1 + j
        missing = n_walk + 1 + n_par
        return np.array([where.get(nid, missing) for nid in node_list], dtype=np.intp)


def _close_writer(writer: RunWriter) -> None:
    try:
        writer.close()
    except Exception:
        pass


def _lr_of(optimizer) -> float | None:
    if optimizer is None:
        return None
    try:
        lr = optimizer.param_groups[0]["lr"]
        return float(lr.item() if isinstance(lr, torch.Tensor) else lr)
    except Exception:
        return None


def _losses(values: list) -> list:
    """Host floats (or None) of the buffered losses: device tensors are stacked and copied once."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if tensors:
        try:
            with torch.no_grad():
                host = iter(torch.stack([t.reshape(()).to(tensors[0].device, torch.float64)
                                         for t in tensors]).cpu().tolist())
        except Exception:
            host = iter([float(t.reshape(())) if t.numel() == 1 else float("nan") for t in tensors])
        values = [next(host) if isinstance(v, torch.Tensor) else v for v in values]
    return [None if v is None else float(v) for v in values]


def _global_ratio(ratios: np.ndarray, weights: np.ndarray) -> float:
    """||delta theta|| / ||theta|| over all parameters, from per-parameter ratios and weight norms."""
    if np.isfinite(ratios).all():
        deltas = ratios * weights
        num = float(np.dot(deltas, deltas))
        den = float(np.dot(weights, weights))
        if math.isfinite(num) and den > 0:
            return math.sqrt(num / den)
    with np.errstate(invalid="ignore", over="ignore"):       # rare: NaN/inf ratios or all-zero weights
        deltas = ratios * weights
        den = float(np.dot(weights, weights))
        if np.isnan(ratios).any():
            return float("nan")
        ok = np.isfinite(deltas)
        num = float(np.sum(deltas[ok] ** 2))
        if not ok.all():
            return float("inf")
    return math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else float("inf"))


def watch(model: nn.Module, path: str | os.PathLike, every: int | None = 10,
          optimizer: torch.optim.Optimizer | None = None, **options: Any) -> Watch:
    """Record a training loop into ``path`` (see ``gradviz.core.record.recorder``).

    With ``optimizer=``, update ratios are measured on a cadence: every step for the
    first 10 steps, then as often as keeps their cost under 2 % of the step time
    (``update_ratio_every=N`` forces every N steps); unmeasured steps have none.
    Rows are buffered in memory and committed every ``commit_every`` steps or
    ``commit_seconds``; a watch garbage-collected without ``close()`` may lose the
    uncommitted ones (``close()``, a ``with`` block or interpreter exit commit them).
    """
    return Watch(model, path, every=every, optimizer=optimizer, **options)
