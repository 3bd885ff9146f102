"""``graph-kept-alive`` and ``memory-growing``: graphs of earlier steps still alive, and the memory they hold.

``KeptGraphs`` is the loop doctor's part for both (the doctor tells it each checked backward and each
optimizer step; it never hooks anything itself but the saved-tensor window of ``saved_bytes``):

* a token kept in the ``metadata`` of the loss's node of steps 1, 2 and every ``every``-th + 1 (never a
  node-norm sampled step: the sampler's hooks leave that graph to the cycle collector) dies with the node:
  tokens of steps before the last one still alive are graphs kept by the loop;
* on those same steps (from step 1: step 0 starts before any optimizer step could open the window),
  ``SavedBytes`` measures what autograd saves, so the finding says the bytes the kept graphs still hold;
* ``memory-growing``: the bytes saved for backward on the checked steps and still held, sampled when each
  measured step ends, rising at every sample (``trend.growing``); where CUDA is in use, also CUDA's
  allocated bytes after checked steps.
"""
from __future__ import annotations

import gc
import weakref
from typing import Any

import torch

from gradviz.core.diagnosis.findings import Finding
from gradviz.core.loop.advice import loop_finding
from gradviz.core.loop.saved_bytes import SavedBytes, size_text
from gradviz.core.loop.trend import growing

__all__ = ["KeptGraphs"]


class _Token:
    """Kept in a loss's ``node.metadata``: it dies with the node (its finalizer says so)."""


class KeptGraphs:
    def __init__(self, every: int, always: int) -> None:
        self.every = every
        self.always = always                      # the first iterations, always checked
        self.saved = SavedBytes()
        # a watch dropped without close() takes its doctor, and this, with it: the window must not stay pushed
        weakref.finalize(self, self.saved.close)
        self._alive: dict[int, int] = {}          # iteration -> checked losses' graphs still alive
        self._saved_series: list[tuple[int, float]] = []
        self._cuda_series: list[tuple[int, float]] = []
        self._reported = 0                        # old steps in the last graph-kept-alive finding

    def token_step(self, it: int) -> bool:
        """The iterations whose loss gets a token (and whose saved tensors are measured, from 1)."""
        return bool(it % self.every) and (it < self.always or it % self.every == 1)

    # -- what the doctor tells it ------------------------------------------------------------
    def after_step(self, step: int, iteration: int, due: bool) -> None:
        """An optimizer finished ``step``; the loop is now at ``iteration`` (a GAN's first optimizer's step
        leaves it unchanged): end the measured iteration, start the next measured one."""
        if due and torch.cuda.is_available() and torch.cuda.is_initialized():
            self._cuda_series.append((step, float(torch.cuda.memory_allocated())))
        saved = self.saved
        if saved.is_open and saved._step != iteration:
            done = saved._step
            saved.close()
            self._saved_series.append((done, float(saved.live())))
        if not saved.is_open and iteration >= 1 and self.token_step(iteration):
            saved.open(iteration)

    def on_backward(self, fn: Any, it: int) -> Finding | None:
        """After the backward of a checked ``it`` from the loss node ``fn``: its token, and the finding when
        more earlier steps' graphs are alive than last said."""
        if not self.token_step(it):
            return None
        # in node.metadata (a dict the C++ node owns): released with the node on every supported torch
        # (a hook would do on 2.13, but on 2.6 it keeps the node's Python object, and so the node, alive)
        token = _Token()
        self._alive[it] = self._alive.get(it, 0) + 1
        weakref.finalize(token, self._graph_freed, it)
        fn.metadata["gradviz_loop_alive"] = token
        old = self._old_alive(it)
        if len(old) >= 2 and len(old) > self._reported:
            # a graph in a reference cycle (a hook's closure: the node-norm sampler's, a user's) waits for
            # the cycle collector, which is no leak of the loop: the young generations (cheap) first
            gc.collect(1)
            old = self._old_alive(it)
        if len(old) < 2 or len(old) <= self._reported:
            return None
        self._reported = len(old)
        measured = [s for s in old if s in self.saved.measured]      # (step 0, or a user's hooks: not counted)
        held = self.saved.live(measured) if measured else None
        holding = "" if held is None else (
            f", holding {size_text(held)} of tensors saved for backward" if held else
            ", holding no saved tensors (their backward freed them: the nodes and their outputs stay)")
        return loop_finding(
            "graph-kept-alive", f"The graphs of {len(old)} earlier checked steps (steps {old[0]}-{old[-1]}) are "
            f"still alive at step {it}{holding}: something keeps each step's loss, or a tensor made from it, "
            "with its grad_fn (total += loss and kin)", step=old[0],
            data={"n_steps": len(old), "steps": old[-20:], "saved_bytes": held})

    def memory_finding(self) -> Finding | None:
        mem = growing(self._saved_series)
        if mem is not None:
            return loop_finding(
                "memory-growing", f"The memory autograd saved for backward on the checked steps and still holds "
                f"rose at every checked step, {size_text(mem['first'])} -> {size_text(mem['last'])} (steps "
                f"{mem['first_step']}-{mem['last_step']})", step=mem["first_step"],
                data={**mem, "measure": "saved-tensors"})
        mem = growing(self._cuda_series)
        if mem is not None:
            return loop_finding(
                "memory-growing", f"CUDA memory allocated rose at every checked step, {mem['first'] / 2**20:.1f} -> "
                f"{mem['last'] / 2**20:.1f} MiB (steps {mem['first_step']}-{mem['last_step']})",
                step=mem["first_step"], data={**mem, "measure": "cuda-allocated"})
        return None

    def close(self) -> None:
        self.saved.close()

    def _old_alive(self, it: int) -> list[int]:
        return sorted(s for s, n in self._alive.items() if n > 0 and s < it - 1)

    def _graph_freed(self, it: int) -> None:
        n = self._alive.get(it, 0) - 1
        if n <= 0:
            self._alive.pop(it, None)
        else:
            self._alive[it] = n
