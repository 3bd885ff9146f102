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
  cost (a copy of the weights and two passes over them) under 0.5 % of the step time,
  re-planned every 50 steps: on the digits MLP that is about every 75 steps. Steps
  not measured have no update ratios (like a step without an optimizer step).
* every ``every`` steps (steps 0, every, 2*every, ...): the gradient norm at every
  node of the autograd graph, with the node ids of ``gradviz.core.trace.tracer``; and the
  graph structure itself (JSON) the first time and whenever its structure hash
  changes.

How node norms are taken with only ``w.step(loss)`` after backward: node hooks
must be in place before backward runs. When the next step is a sampled one, ``w.step``
arms a tap (``gradviz.core.record.tap``): ``torch.autograd.backward`` (what
``loss.backward()`` calls) is swapped for a pass-through that hands this thread's next
backward to the watch, then puts the function back (a registered process patch; where it
cannot be installed, a ``TorchFunctionMode`` waits for ``Tensor.backward`` instead). There, before the backward runs, the loss's graph is walked and its structure keyed;
a new structure is stored (with the module paths captured by forward hooks on the first
sampled step) and run under the Python hooks of ``NodeNormSampler.hooked_backward``, placed
by a ``hook_plan`` cached per structure (about one hook per three nodes: a node whose only
consumer hands it a gradient is measured by that consumer's post hook, and one whose
consumer is a view or transpose gets its consumer's norm). With the native accelerator
(``gradviz.core.native``, built once per machine), a structure seen before is walked,
keyed and hooked in C++ instead: a pre-hook per node reduces each gradient to its squared
norm without the GIL or a Python call (on the digits MLP a sampled step costs ~20 us
instead of ~150 us). Nothing is hooked on the model between steps. Consequences: node
norms need the backward to go through ``torch.autograd.backward`` (``loss.backward()``,
not ``torch.autograd.grad``); a sampled step that misses it simply has no node norms.
Nothing keeps the autograd graph alive after the step.

The loop doctor (``loop=True``, the default; ``gradviz.core.loop.doctor``): the training loop's own bugs
(gradients not cleared, a graph kept alive or reused, a frozen parameter the optimizer still moves ...),
stored in the meta (``loop_findings``) and shown by ``runs show``. It sees every optimizer of the
process through the global optimizer step hooks, and the backwards of the steps it checks (the first
three, every ``every``-th and the step after each) through the same tap.

Commits: rows are buffered and committed at the first step, then every ``commit_seconds``
(0.5) or ``commit_every`` (1000) rows, from ``w.step``; when no ``w.step`` comes (an
evaluation, a stalled data loader) a background thread commits what is buffered
``commit_seconds`` after it was recorded, and interpreter exit commits the rest. A killed
process loses at most the last ``commit_seconds`` of steps.

Files: SQLite, see ``gradviz.core.record.schema``. Under ``torch.distributed``
(world size > 1, from the process group or torchrun's environment) each rank writes its own
file: ``run.gvrun`` -> ``run.rank0.gvrun``, ``run.rank1.gvrun`` ... (``run.node1.rank5.gvrun``
when the world spans several nodes; or format ``{rank}``/``{node}`` in the path), with rank,
world size, node and, for sharded (FSDP2 / DTensor) parameters, each one's shard layout in
the meta table. Sharded parameters' gradient norms are those of the full gradients (one
collective per step sums the ranks' pieces: ``gradviz.core.stats.norms_sharded``), the same
on every rank; so every rank must call ``w.step`` for the same steps. Errors writing the file
raise ``RecordError``, never silently later; see "Faults" below.

Faults. Every recorded step reaches the file, or the user hears at once. ``RecordError``
comes from the constructor (a bad or too long path, a full disk, a path another live watch
records into: one writer per run file, ``lock``) or from ``w.step`` (disk full, a read-only
file system, the file removed). A commit that failed, in ``w.step`` or in the background,
makes every later ``w.step`` retry it and raise, naming the cause and the steps held in
memory, until one succeeds; while it fails no new step is recorded (what is held stays
bounded). A bad loss (``w.step("oops")``, a list, a tensor of several values) raises
``TypeError`` at that call (``losses``), nothing lost. An interrupt (Ctrl-C) anywhere in the
row store or the commit leaves the rows buffered, for ``close`` or interpreter exit.
Parameters replaced or added mid-run (``model.fc = nn.Linear(...)``) are followed from the
next step on (``model_follow``): new names get new columns, removed ones record "no
gradient", and the meta's ``model_changes`` lists each change (``runs show`` reports it).
"""
from __future__ import annotations

import collections
import logging
import math
import os
import socket
import sys
import time
import weakref
from typing import Any

import numpy as np
import torch
from torch import nn

from gradviz.core.loop.doctor import LoopDoctor
from gradviz.core.record.commits import BACKGROUND_COMMITS
from gradviz.core.record.ddp import dist_info, largest_over_ranks, local_rank, node_info, unwrap_model
from gradviz.core.record.losses import step_loss
from gradviz.core.record.model_follow import ParamFollower, union_order
from gradviz.core.record.options import check_options
from gradviz.core.record.row_commits import RowCommits
from gradviz.core.record.sampling import NodeRecording
from gradviz.core.record.schema import SCHEMA_VERSION, RecordError, rank_path
from gradviz.core.record.tap import BackwardTap
from gradviz.core.record.learning_rate import lr_of
from gradviz.core.record.writer import RunWriter
from gradviz.core.stats.sharding import any_dtensor, layout
from gradviz.core.stats.steps import StepStats
from gradviz.core.runtime.ties import tied_with
from gradviz.core.stats.update_cadence import UpdateCadence
from gradviz.core.runtime.version import __version__

log = logging.getLogger(__name__)

__all__ = ["watch", "Watch", "unwrap_model", "dist_info"]


class Watch(RowCommits):
    """Records a training loop; see the module docstring. Use as a context manager or call ``close()``."""

    def __init__(self, model: nn.Module, path: str | os.PathLike, every: int | None = 10,
                 optimizer: torch.optim.Optimizer | None = None, *, graph: bool = True,
                 capture_modules: bool = True, overwrite: bool = True, commit_every: int = 1000,
                 commit_seconds: float = 0.5, rank: int | None = None, world_size: int | None = None,
                 update_ratio_every: int | None = None, loop: bool = True) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch() needs an nn.Module, got {type(model).__name__}")
        check_options(every, commit_every, commit_seconds, update_ratio_every)
        self.model = model
        self.module = unwrap_model(model)
        self.every = int(every) if every else 0
        self.optimizer = optimizer
        drank, dworld = dist_info()
        self.rank = drank if rank is None else int(rank)
        self.world_size = dworld if world_size is None else int(world_size)
        self.node, self.n_nodes = node_info()
        self.path = rank_path(path, self.rank, self.world_size, self.node, self.n_nodes)
        self.stats = StepStats(self.module.named_parameters(), track_updates=optimizer is not None)
        self.param_names = list(self.stats.names)      # every parameter recorded so far: the file's columns
        self._shapes = [list(p.shape) for p in self.stats.params]
        self._columns: tuple | None = None             # (column of each tracked parameter, width) after a removal
        self._changes: list[dict] = []
        self._writer = RunWriter(self.path, self._meta(model), overwrite=overwrite, commit_every=commit_every,
                                 commit_seconds=commit_seconds)
        try:
            self.nodes = NodeRecording(self.module, self.stats, self._writer, every=self.every,
                                       record_graph=graph, capture_modules=capture_modules)
            # FSDP2 swaps its own (DTensor) parameters in and out: only plain modules are followed
            self._follower = ParamFollower(self.module) if self.stats.strategy != "sharded" else None
        except BaseException:
            self._writer.abandon()            # a failed start holds no lock on the path
            raise
        if self._follower is not None:
            self.nodes.before_backward = weakref.WeakMethod(self._follow_if_changed)
        self._step = 0                        # index the next w.step gets
        # rows since the last commit, converted to arrays in one go when committing; a deque:
        # the background commit takes rows from it while w.step appends (both atomic)
        self._rows: collections.deque[tuple] = collections.deque()
        self._commit_every = max(1, int(commit_every))
        self.commit_seconds = float(commit_seconds)
        # the first step is committed at once: a path that cannot take rows (a full disk) fails
        # in the user's loop at step 0; later commits come every commit_seconds (or commit_every rows)
        self._last_flush = -math.inf
        self._on_cpu = self.stats.device.type == "cpu"
        # update ratios: None = auto; sharded parameters: the same steps on every rank (a collective each)
        self._cadence = UpdateCadence(update_ratio_every,
                                      agree=largest_over_ranks if self.stats.strategy == "sharded" else None)
        self._t_prev: float | None = None
        self._upd_now = False
        self._upd_cost = 0.0
        self._closed = False
        self.raw_norms_used = False           # the last step's grad_norms (w.step) were recorded
        # the open step (see "before or after opt.step()" in the module docstring)
        self._grads_read = False              # grads of the current step already read (w.step or pre-hook)
        self._awaiting_update = False         # w.step done, optimizer step expected
        self._updated = False                 # optimizer step done for the current step
        self._open_loss: Any = None
        self._open_step: int | None = None
        self._lr: float | None = None
        self._handles: list[Any] = []
        if self.every:
            self.nodes.arm(0, True)           # step 0 is sampled
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._opt_pre))
            self._handles.append(optimizer.register_step_post_hook(self._opt_post))
        # the loop doctor (gradviz.core.loop): its own global optimizer hooks, and the backward tap on
        # the steps it checks (and the step after each: a check spans two steps)
        self.loop: LoopDoctor | None = None
        self._loop_tap: BackwardTap | None = None
        if loop:
            self.loop = LoopDoctor(every=self.every or 10, on_change=weakref.WeakMethod(self._store_loop))
            self.loop.add_model(self.module)
            self._loop_tap = BackwardTap(self.loop, slow_path=False)
            self._loop_tap.arm()
        self._writer.before_commit = weakref.WeakMethod(self._drain)
        # interpreter exit commits what is buffered (weakref.finalize runs at exit)
        self._finalizer = weakref.finalize(self, _close_writer, self._writer)
        BACKGROUND_COMMITS.add(self)

    def _meta(self, model: nn.Module) -> dict[str, Any]:
        params, optimizer = self.stats.params, self.optimizer
        return {
            "format": SCHEMA_VERSION, "gradviz_version": __version__, "torch_version": torch.__version__,
            "created": time.time(), "model_class": f"{type(self.module).__module__}.{type(self.module).__qualname__}",
            "wrapper": type(model).__name__ if model is not self.module else None,
            "param_names": self.param_names, "param_shapes": self._shapes,
            "param_numel": [int(p.numel()) for p in params], "rank": self.rank,
            "world_size": self.world_size, "hostname": socket.gethostname(), "pid": os.getpid(),
            "every": self.every, "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "device": str(self.stats.device), "argv": list(sys.argv), "status": "running",
            "node": self.node, "nodes": self.n_nodes, "local_rank": local_rank(), "norms": self.stats.strategy,
            "param_shards": [layout(p) for p in params] if any_dtensor(params) else None,
            # one tensor under several names (one object or several over its bytes): one column, the first name
            "storage_ties": [[first, *others] for first, others in tied_with(self.module).items()],
        }

    # -- public -----------------------------------------------------------
    @property
    def committed_step(self) -> int | None:
        """The last step durably written (visible to readers, survives a SIGKILL)."""
        return self._writer.committed_step

    @property
    def n_steps(self) -> int:
        return self._step

    def set_loop_findings(self, findings: list[dict]) -> None:
        """Store the loop doctor's findings (``gradviz.core.loop``) in the meta: written with the next
        commit (within ``commit_seconds``) and at close, like the rows."""
        if self._closed:
            return
        try:
            self._writer.set_meta("loop_findings", findings)
        except RecordError:                   # the writer's failure: the next w.step raises it
            log.debug("gradviz.watch: storing the loop findings failed", exc_info=True)

    def set_info(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) under ``key`` in the meta: what ``gradviz run`` found out about the script."""
        if not self._closed:
            self._writer.set_meta(key, value)

    def step(self, loss: Any = None, *, step: int | None = None, grad_norms: Any = None,
             clipped_at: float | None = None) -> int:
        """Record the step whose backward just ran; returns its step number.

        ``grad_norms``: the step's gradient norms measured before a clip the loop did itself (one 0-d
        tensor per watched parameter, in ``stats.params`` order, None = no gradient), recorded instead
        of the norms of the clipped ``.grad``; ``clipped_at``: that clip's ``max_norm``. When they do
        not cover the gradients present, the measured norms stay and ``raw_norms_used`` is False."""
        if self._closed:
            raise RecordError("this watch is closed", self.path)
        loss = step_loss(loss, self._on_cpu)             # a bad loss raises here, before anything changes
        if self._writer.failure is not None:
            try:
                self._retry_failed_commit()
            except RecordError:
                if step is None:              # this step passed unrecorded: later ones keep the loop's numbers
                    self._step += 1
                raise
        nodes = self.nodes
        if nodes.pending:
            nodes.disarm()
        if self._open_step is not None and not self._updated:
            # previous step still open: its optimizer step never came (or w.step twice)
            self._finish_open()
        s = self._step if step is None else int(step)
        self._step = s + 1
        if not self._grads_read:
            self._read_grads(s)
        if grad_norms is not None:
            self.raw_norms_used = self.stats.use_grad_norms(grad_norms, clipped_at)
        self._open_loss = loss
        self._open_step = s
        if self.optimizer is None or self._updated:
            self._finish_open()
        else:
            self._awaiting_update = True
        rows = self._rows
        if rows and (len(rows) >= self._commit_every or time.monotonic() - self._last_flush >= self.commit_seconds):
            try:
                self._flush()
            except RecordError:
                raise self._failure_error("this step is held with them") from None
        every = self.every
        if every and (self._step % every == 0 or nodes.pending):
            nodes.arm(self._step, self._step % every == 0)
        if self._loop_tap is not None:
            if self.loop.wants(self._step):
                self._loop_tap.arm()
            elif self._loop_tap.pending:
                self._loop_tap.disarm()
        return s

    def _store_loop(self) -> None:
        if self.loop is not None:
            self.set_loop_findings([f.to_dict() for f in self.loop.findings()])

    def close(self) -> None:
        """Commit what is buffered and close the file. A commit that fails raises ``RecordError``
        naming the steps lost; Ctrl-C during it leaves the rows to the exit handler."""
        if self._closed:
            return
        self._closed = True
        BACKGROUND_COMMITS.discard(self)
        if self._follower is not None:
            self._follower.close()
        if self.loop is not None:
            self._loop_tap.disarm()
            self._store_loop()
            self.loop.close()
        try:
            self.nodes.close()
            if self._open_step is not None:
                self._finish_open()
            for h in self._handles:
                h.remove()
            self._handles.clear()
            self._writer.commit()
            self._writer.set_meta("status", "closed")
            self._writer.set_meta("steps", self._step)
        except RecordError as exc:
            held = self._held_rows()
            self._writer.abandon()
            self._finalizer.detach()
            lost = f": {held} recorded step(s) could not be written" if held else ""
            raise RecordError(f"{exc.message}{lost}", self.path) from None
        self._writer.close()                 # Ctrl-C here: the finalizer stays, exit commits the rest
        self._finalizer.detach()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- optimizer hooks ----------------------------------------------------
    def _opt_pre(self, optimizer, args, kwargs) -> None:
        if self._awaiting_update:                       # the usual order: w.step came first
            lr = optimizer.param_groups[0]["lr"]
            self._lr = lr if type(lr) is float else lr_of(optimizer)
            return
        if self._closed or self._writer.failure is not None:
            return                                      # a failing watch records nothing (w.step says why)
        self._lr = lr_of(optimizer)
        if kwargs.get("closure") is not None or (args and callable(args[0])):
            return   # opt.step(closure): backward runs inside the step (Lightning, LBFGS); w.step reads the grads
        if self._open_step is not None and self._awaiting_update:
            return                                      # w.step came first: grads read, theta snapshot
        if self._grads_read and self._updated:
            # order "opt.step(); w.step()" but w.step never came for the last step
            self._finish_open(step=self._step)
            self._step += 1
        if not self._grads_read:
            self._read_grads(self._step)

    def _read_grads(self, step: int) -> None:
        """Gradient norms of ``step`` (and the theta snapshot when its update ratios are due)."""
        if self._follower is not None and self._follower.changed:
            self._follow_model(step)
        now = time.perf_counter()
        if self._t_prev is not None:
            self._cadence.step_took(now - self._t_prev)
        self._t_prev = now
        self._upd_now = upd = self.optimizer is not None and self._cadence.due(step)
        self.stats.begin()
        self.stats.grads_ready(updates=upd)
        if upd:                                   # the snapshot is part of what the ratios cost
            self._upd_cost = time.perf_counter() - now
        self._grads_read = True

    def _opt_post(self, optimizer, args, kwargs) -> None:
        if self._awaiting_update and not self._upd_now:  # the usual step: close its row
            self._updated = True
            self._finish_open()
            return
        if self._closed or not self._grads_read:
            return
        if self._upd_now:
            t0 = time.perf_counter()
            self.stats.after_update()
            self._cadence.update_took(self._upd_cost + time.perf_counter() - t0)
        self._updated = True
        if self._awaiting_update:
            self._finish_open()

    # -- rows ---------------------------------------------------------------
    def _finish_open(self, step: int | None = None) -> None:
        s = self._open_step if step is None else step
        if s is None:
            s = self._step
        if not self._grads_read:
            self._read_grads(s)
        lr = self._lr if self._lr is not None else lr_of(self.optimizer)
        self._rows.append((s, time.time(), self._open_loss, lr, self.stats.numbers(),
                           self._updated and self._upd_now, self.nodes.take()))
        self._open_step = None
        self._open_loss = None
        self._grads_read = False
        self._awaiting_update = False
        self._updated = False
        self._lr = None

    # -- a model that changes under the watch --------------------------------
    def _follow_if_changed(self) -> None:
        """Before a sampled backward: follow new parameters first, so its node norms are theirs."""
        if self._follower is not None and self._follower.changed and not self._grads_read:
            self._follow_model(self.nodes.step)

    def _follow_model(self, step: int) -> None:
        """Record the module's parameters as they are now (see ``model_follow``)."""
        change, now = self._follower.diff(step, *self.stats.named_all())
        if not change:
            return
        try:
            self._flush()                     # the rows of the old parameters, converted with their layout
        except RecordError:
            log.debug("gradviz.watch: commit before following the model failed", exc_info=True)
        union, ordered = union_order(self.param_names, now)
        shapes = {**dict(zip(self.param_names, self._shapes)), **{n: list(p.shape) for n, p in ordered}}
        self.stats = StepStats(ordered, track_updates=self.optimizer is not None)
        self.param_names = union
        names = self.stats.names
        self._columns = (None if names == union else
                         (np.array([union.index(n) for n in names], dtype=np.int64), len(union)))
        self._on_cpu = self.stats.device.type == "cpu"
        self.nodes.follow(self.stats)
        self._shapes = [shapes[n] for n in union]
        self._changes.append(change.to_dict())
        log.warning("gradviz.watch: the model's parameters changed before step %d (%s): recorded from this step "
                    "on", step, change.text())
        try:
            self._writer.set_meta("param_names", union)
            self._writer.set_meta("param_shapes", self._shapes)
            self._writer.set_meta("param_numel", [int(np.prod(sh)) for sh in self._shapes])
            self._writer.set_meta("model_changes", self._changes)
        except RecordError:                   # the writer's failure: the next w.step raises it
            log.debug("gradviz.watch: storing the model change failed", exc_info=True)


def _close_writer(writer: RunWriter) -> None:
    """A watch garbage-collected or alive at interpreter exit: commit and close its file."""
    try:
        writer.close()
    except RecordError as exc:                # one line: w.step already raised the cause
        log.warning("gradviz.watch: %s (the steps not yet written are lost)", exc)


def watch(model: nn.Module, path: str | os.PathLike, every: int | None = 10,
          optimizer: torch.optim.Optimizer | None = None, **options: Any) -> Watch:
    """Record a training loop into ``path`` (see ``gradviz.core.record.recorder``).

    With ``optimizer=``, update ratios are measured on a cadence: every step for the
    first 10 steps, then as often as keeps their cost under 0.5 % of the step time
    (``update_ratio_every=N`` forces every N steps); unmeasured steps have none.
    Rows are buffered in memory and committed at the first step, then every
    ``commit_seconds`` (0.5) or ``commit_every`` (1000) steps, whichever comes first, and by a
    background thread when no ``w.step`` comes for ``commit_seconds``; ``close()``, a ``with``
    block, garbage collection or interpreter exit commit the rest.
    """
    return Watch(model, path, every=every, optimizer=optimizer, **options)
