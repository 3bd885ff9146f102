"""Gradient norms measured when a backward is complete, before a trainer clips them (``BackwardEndNorms``).

A trainer that clips inside its step (transformers' Trainer: ``accelerator.clip_grad_norm_`` before
``on_pre_optimizer_step``) leaves a callback only the clipped gradients. The norms before the clip
are measured from the backward itself:

- one process: a post-accumulate-grad hook on each parameter (``register_post_accumulate_grad_hook``,
  public) measures its gradient once it is complete (``mode == "hook"``);
- DDP (world size > 1): those hooks run before the all-reduce (each rank's own gradients). DDP's
  reducer writes the averaged gradients in ``finalize_backward``, a final callback of the autograd
  engine it queues when its last bucket is ready. The first hook of the backward queues a final
  callback that itself queues a second one; final callbacks run in the order queued and a callback
  queued while they run goes to the end of the list, so the second runs after DDP's, once every
  ``.grad`` holds the averaged gradient, and measures them there (``mode == "backward_end"``).

Queuing a final callback is only offered by the engine's private
``torch.autograd.Variable._execution_engine.queue_callback`` (what DDP's and FSDP's own Python code
call; present from torch 1.x to 2.13). No public mechanism sees the averaged gradients before the
clip: tensor and post-accumulate-grad hooks, ``register_multi_grad_hook`` and module backward hooks
all run before the reducer's all-reduce completes; ``DistributedDataParallel.register_comm_hook``
would replace the communication itself (one hook per model, the user's or the Trainer's own, such as
PowerSGD); and the Trainer hands its callbacks neither the accelerator nor the clip. Where the
private call is missing, ``mode`` is None: the caller records the clipped norms and says so.

``should_measure()`` says whether this backward completes the step's gradients (gradient
accumulation: only the last micro-batch's, which under DDP is also the only one that all-reduces).
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

from gradviz.core.stats.tied_grads import group_grad

log = logging.getLogger(__name__)

__all__ = ["BackwardEndNorms", "queue_after_final_callbacks"]


def _engine_queue() -> Callable | None:
    """The autograd engine's ``queue_callback`` (private; the only place gradviz uses it), or None."""
    engine = getattr(torch.autograd.Variable, "_execution_engine", None)
    queue = getattr(engine, "queue_callback", None)
    return queue if callable(queue) else None


def queue_after_final_callbacks(fn: Callable[[], None]) -> bool:
    """Run ``fn`` at the end of the running backward, after every final callback queued during it
    (DDP's ``finalize_backward`` among them). Call from inside a backward (a gradient hook).
    False when the engine offers no way (``fn`` will not run)."""
    queue = _engine_queue()
    if queue is None:
        return False
    queue(lambda: queue(fn))     # queued from a final callback: after those already in the list
    return True


def _norm(group: Sequence[torch.Tensor]) -> torch.Tensor | None:
    g = group_grad(group)           # one object, or several over the same bytes (their gradients summed)
    return None if g is None else torch.linalg.vector_norm(g.detach()).float()


class BackwardEndNorms:
    """The gradient norms of ``groups`` (one 0-d tensor each, None = no gradient) from the last backward
    that ``should_measure()`` accepted; ``take()`` hands them over once and forgets them. A group is one
    watched parameter's objects (``StepStats.groups()``: one, or several tied by storage)."""

    def __init__(self, groups: Sequence[Sequence[torch.Tensor]], should_measure: Callable[[], bool], *,
                 after_reduce: bool) -> None:
        self.groups = [list(g) for g in groups]
        self.should_measure = should_measure
        self.mode: str | None = "hook"
        if after_reduce:
            self.mode = "backward_end" if _engine_queue() is not None else None
        self._norms: list[torch.Tensor | None] = [None] * len(self.groups)
        self._queued = False
        self._failed = False
        # a group's last object to be reached measures the group complete (each hook measures it again)
        self._handles = [] if self.mode is None else [
            p.register_post_accumulate_grad_hook(self._hook(i)) for i, g in enumerate(self.groups) for p in g]

    def _hook(self, i: int):
        def hook(p: torch.Tensor) -> None:
            if not self.should_measure():
                return
            if self.mode == "hook":
                self._norms[i] = _norm(self.groups[i])
            elif not self._queued and not self._failed:
                self._queued = True
                try:
                    queue_after_final_callbacks(self._measure_all)
                except RuntimeError as exc:     # the engine refused (not inside a backward): clipped norms
                    self._queued, self._failed = False, True
                    log.warning("gradviz: cannot measure the gradients after the all-reduce (%s); the norms "
                                "recorded are those after the trainer's clip", exc)
        return hook

    def _measure_all(self) -> None:
        """At the end of the backward, after DDP's finalize: every gradient present (a parameter this
        rank did not use still gets the others' averaged gradient from the all-reduce)."""
        self._queued = False
        with torch.no_grad():
            self._norms[:] = [_norm(g) for g in self.groups]

    def take(self) -> list[torch.Tensor | None] | None:
        """The last measured norms (None when nothing is measured: ``mode`` None)."""
        if self.mode is None:
            return None
        norms = list(self._norms)
        self._norms[:] = [None] * len(norms)
        self._queued = False        # a backward that raised never ran its final callbacks: measure the next
        return norms

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
