"""How often to measure update ratios ``||delta theta|| / ||theta||``: on a cost budget.

Measuring them needs a copy of the weights before the optimizer step and two passes over
them after it. On a big model that is a few per cent of a step and worth doing every
step; on a tiny one (the digits MLP: 0.55 ms a step) it would cost more than everything
else gradviz does. The ratio moves slowly (the articles' rule of thumb watches its order
of magnitude, ~1e-3), so the Trainer and ``watch`` measure it as often as keeps its cost
under ``UPDATE_BUDGET`` of the step time; unmeasured steps have NaN.
"""
from __future__ import annotations

import math
from typing import Callable

__all__ = ["UPDATE_BUDGET", "UpdateCadence"]

UPDATE_BUDGET = 0.005          # at most this fraction of the step time goes to update ratios
REPLAN_EVERY = 50              # re-derive the cadence this often (steps)
WARMUP_STEPS = 10              # measure every step until then (the first costs are known)


class UpdateCadence:
    """``due(step)``: measure update ratios on this step? ``every=N`` forces every N steps
    (0: never); ``None`` plans from the costs reported with ``step_took`` and ``update_took``.

    ``agree``: called with each re-planned interval, returns the one to use. Ranks whose
    statistics need a collective (sharded parameters) must measure on the same steps: there
    it is the largest interval any rank planned (one all-reduce per re-plan)."""

    def __init__(self, every: int | None = None, agree: Callable[[int], int] | None = None) -> None:
        self.every = every
        self.agree = agree
        self.auto_every = 1
        self.update_cost = 0.0         # EMA, seconds the ratios cost on a measured step
        self.step_cost = 0.0           # EMA, seconds a step takes
        self._updates_seen = 0

    def due(self, step: int) -> bool:
        every = self.every
        if every is None:
            if step >= WARMUP_STEPS and step % REPLAN_EVERY == WARMUP_STEPS:
                planned = max(1, math.ceil(self.update_cost / (UPDATE_BUDGET * self.step_cost))) \
                    if self.step_cost > 0 else self.auto_every
                self.auto_every = planned if self.agree is None else self.agree(planned)
            every = self.auto_every
        return every > 0 and step % every == 0

    def step_took(self, seconds: float) -> None:
        """A step's time. A pause between steps (an evaluation, a checkpoint, another job) counts
        at most 4x the running estimate: one long gap must not buy a dense cadence."""
        if not self.step_cost:
            self.step_cost = seconds
        else:
            self.step_cost = 0.9 * self.step_cost + 0.1 * min(seconds, 4.0 * self.step_cost)

    def update_took(self, seconds: float) -> None:
        """The time the ratios cost on a measured step: the snapshot of the weights before the
        optimizer step (``grads_ready(updates=True)``) plus ``after_update``, both timed by the
        caller. The extra memory traffic slows the next kernels too (measured in
        ``benchmarks/bench_record.py``: the measured time was ~2/3 of the real cost): counted 1.5x."""
        spent = 1.5 * seconds
        self._updates_seen += 1
        if self._updates_seen <= 2 or not self.update_cost:
            # the first measurements allocate the snapshot: the second replaces the first
            self.update_cost = spent
        else:
            self.update_cost = 0.7 * self.update_cost + 0.3 * spent
