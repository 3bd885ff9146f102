"""The ``sharded`` norm strategy of ``StepStats``: parameters that are DTensors (FSDP2, tensor parallelism).

Each rank holds a shard (or a replica) of a parameter and of its gradient. A norm is that of the
*whole* tensor, the same on every rank: each rank squares its local parts and one all-reduce per
step sums them for every parameter at once (``gradviz.core.stats.shard_sum``); ``measure_update`` adds
one more on the steps whose update ratios are measured (their cadence is agreed between ranks,
``gradviz.core.record.recorder``). Parameters that are not DTensors (a replicated head next to
tensor-parallel layers) keep this rank's own numbers: if ranks disagree on them, the run's rank
comparison says so instead of an average hiding it.

Which gradients exist is part of the same all-reduce (a presence count per parameter), so every
rank reads the same ``present`` set and sends vectors of the same length.

Without clipping (``watch``) the all-reduce is started, not waited for: the step's ``StepNumbers``
carry a ``settle`` that waits and fills them when the row is stored (``step_columns``), so the
collective overlaps the next forward instead of stalling the step until the slowest rank arrives.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from gradviz.core.stats.shard_sum import ShardSum, local_squares, settled
from gradviz.core.stats.sharding import is_dtensor, local
from gradviz.core.stats.step_numbers import StepNumbers

__all__ = ["ShardedNorms"]


class ShardedNorms:
    """Whole-tensor norms of sharded parameters, one collective per step (see the module docstring)."""

    name = "sharded"

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.n = len(params)
        self.sharded = [j for j, p in enumerate(params) if is_dtensor(p)]
        self.plain = [j for j, p in enumerate(params) if not is_dtensor(p)]
        self.sum = ShardSum([params[j] for j in self.sharded])
        self.device = local(params[0]).device if params else torch.device("cpu")
        self._wmask = self.sum.mask([params[j] for j in self.sharded]) if self.sharded else None
        self._snapshot: list[torch.Tensor] | None = None
        self._host = self.sum.device.type == "cpu"

    def measure(self, max_norm: float | None, updates: bool) -> tuple[StepNumbers, torch.Tensor | None]:
        params, n = self.params, self.n
        grads = [None if p.grad is None else settled(p.grad) for p in params]
        sq, has = self._grad_squares(grads)
        weights = local_squares(params, self.sum.device) if updates else None
        gmask = self.sum.mask([params[j] if grads[j] is None else grads[j] for j in self.sharded]) \
            if self.sharded else None
        done = self._reduce_rows(sq, gmask, has, weights)
        numbers = StepNumbers([], self._host, n, n, None, weights=updates)

        def fill() -> None:
            done()
            present_idx = [j for j in range(n) if has[j] > 0]
            numbers.present = None if len(present_idx) == n else tuple(present_idx)
            numbers.n_grads = len(present_idx)
            values = sq if numbers.present is None else sq[present_idx]
            numbers.values = self._values(torch.cat([values, weights]) if updates else values)

        total = None
        if max_norm is None:
            numbers.settle = fill             # read when the row is stored: the all-reduce overlaps the next steps
        else:                                 # clipping needs the total now
            fill()
            total = self._clip(grads, numbers, sq, float(max_norm))
        if updates:
            with torch.no_grad():
                locals_ = [local(p) for p in params]
                if self._snapshot is None:
                    self._snapshot = [t.detach().clone() for t in locals_]
                else:
                    torch._foreach_copy_(self._snapshot, locals_)
        return numbers, total

    def _clip(self, grads: list, numbers: StepNumbers, sq: torch.Tensor, max_norm: float) -> torch.Tensor | None:
        """``clip_grad_norm_`` on the local pieces, with the whole gradients' total norm."""
        present_idx = list(range(self.n)) if numbers.present is None else list(numbers.present)
        if not present_idx:
            return None
        total_f = math.sqrt(float(sq[present_idx].sum()))
        coef = min(1.0, max_norm / (total_f + 1e-6))                 # clip_grad_norm_'s coefficient
        if coef < 1.0:
            with torch.no_grad():
                torch._foreach_mul_([local(grads[j]) for j in present_idx if grads[j] is not None], coef)
        numbers.max_norm = max_norm
        return torch.tensor(total_f, dtype=torch.float32)

    def measure_update(self, numbers: StepNumbers) -> None:
        if self._snapshot is None or not numbers.weights:
            return
        with torch.no_grad():
            deltas = torch._foreach_sub(self._snapshot, [local(p) for p in self.params])
        sq = local_squares(deltas, self.sum.device)
        done = self._reduce_rows(sq, self._wmask, None, None)     # an update has its parameter's layout
        before = numbers.settle

        def fill() -> None:
            if before is not None:
                before()                       # the gradients' numbers come first in ``values``
            done()
            numbers.values.extend(self._values(sq))
            numbers.deltas = True
        numbers.settle = fill

    def restore(self) -> bool:
        if self._snapshot is None:
            return False
        with torch.no_grad():
            torch._foreach_copy_([local(p) for p in self.params], self._snapshot)
        return True

    # -- helpers ----------------------------------------------------------
    def _grad_squares(self, grads: list) -> tuple[torch.Tensor, torch.Tensor]:
        """(squared local norms, 1.0 where this rank has the gradient) per parameter, float64."""
        dev = self.sum.device
        have = [j for j, g in enumerate(grads) if g is not None]
        sq = torch.zeros(self.n, dtype=torch.float64, device=dev)
        has = torch.zeros(self.n, dtype=torch.float64, device=dev)
        if have:
            sq[have] = local_squares([grads[j] for j in have], dev)
            has[have] = 1.0
        return sq, has

    def _reduce_rows(self, sq: torch.Tensor, mask: torch.Tensor | None, has: torch.Tensor | None,
                     weights: torch.Tensor | None) -> Callable[[], None]:
        """Start summing the sharded parameters' entries across ranks, one all-reduce for all rows;
        returns what writes the sums back into ``sq``, ``has``, ``weights`` (it waits for them)."""
        s = self.sharded
        if not s or self.sum.world <= 1:
            return _nothing
        rows = [sq[s] * mask]
        if has is not None:
            rows.append(has[s])
        if weights is not None:
            rows.append(weights[s] * self._wmask)
        block = torch.stack(rows)
        work = self.sum.reduce_async(block)

        def write_back() -> None:
            if work is not None:
                work.wait()
            sq[s] = block[0]
            if has is not None:
                has[s] = block[1]
            if weights is not None:
                weights[s] = block[-1]
        return write_back

    def _values(self, v: torch.Tensor) -> list:
        """Squared norms as host floats (CPU), or norms as 0-d device tensors (no host sync)."""
        if self._host:
            return v.tolist()
        return list(v.sqrt().to(torch.float32).unbind())


def _nothing() -> None:
    return None
