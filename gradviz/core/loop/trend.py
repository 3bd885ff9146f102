"""Pure functions over recorded steps: a loss that does not fall while the gradients are healthy.

``flat_loss(steps, losses, grad_norms)``: over the whole run from its first recorded step (at least
``MIN_STEPS``: a run that learnt and then converged has fallen, and is not flat), the least-squares slope of the loss against the step is not significantly below zero
(its t statistic above -2: a fall smaller than its own noise) and the loss moved by under 1 % of its
level, while the global gradient norm is finite, above 1e-6 and below 1e4 (the exploding and vanishing
limits the other run findings use): the optimizer is stepping on real gradients and nothing is learnt.
"""
from __future__ import annotations

import numpy as np

MIN_STEPS = 20
T_LIMIT = -2.0
HEALTHY = (1e-6, 1e4)


def flat_loss(steps: np.ndarray, losses: np.ndarray, grad_norms: np.ndarray) -> dict | None:
    """The flat run's numbers (first and last step, loss at both ends, median gradient norm), or None."""
    ok = np.isfinite(losses) & np.isfinite(grad_norms)
    steps, losses, grad_norms = steps[ok], losses[ok], grad_norms[ok]
    if len(steps) < MIN_STEPS:
        return None
    med = float(np.median(grad_norms))
    if not HEALTHY[0] < med < HEALTHY[1]:
        return None
    x = steps.astype(np.float64) - steps.mean()
    y = losses.astype(np.float64)
    sxx = float((x * x).sum())
    if sxx <= 0:
        return None
    slope = float((x * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - slope * x
    se = float(np.sqrt((resid * resid).sum() / max(len(y) - 2, 1) / sxx))
    level = float(np.abs(y).mean()) or 1.0
    fall = -slope * float(steps[-1] - steps[0])
    t = slope / se if se > 0 else (0.0 if slope == 0 else np.sign(slope) * np.inf)
    if t < T_LIMIT or fall > 0.01 * level:
        return None
    return {"first_step": int(steps[0]), "last_step": int(steps[-1]), "loss_first": float(y[:5].mean()),
            "loss_last": float(y[-5:].mean()), "grad_norm_median": med, "slope_t": float(t)}


def growing(samples: list[tuple[int, float]], min_samples: int = 5) -> dict | None:
    """Memory rising at every sample of the last ``min_samples`` (after the first two steps, when the
    optimizer's state is allocated) and by at least 5 % in all: ``{first_step, last_step, first, last}``."""
    pts = [(s, v) for s, v in samples if s >= 2]
    if len(pts) < min_samples:
        return None
    tail = pts[-min_samples:]
    vals = [v for _, v in tail]
    if all(b > a for a, b in zip(vals, vals[1:])) and vals[-1] >= 1.05 * vals[0]:
        return {"first_step": tail[0][0], "last_step": tail[-1][0], "first": vals[0], "last": vals[-1]}
    return None
