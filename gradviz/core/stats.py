"""Summaries of a gradient (or value) tensor as plain numbers.

``tensor_stats`` reduces on the tensor's device and copies one small vector to the
host, so a traced GPU model pays one sync per node, not one per number.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import torch

STAT_KEYS = ("norm", "mean", "std", "min", "max", "zero_frac", "nan", "inf", "numel")
HIST_BINS = 32


def _finite_or(value: float) -> float | None:
    return value if math.isfinite(value) else None


def tensor_stats(tensors: Iterable[torch.Tensor | None], bins: int = HIST_BINS) -> dict | None:
    """Stats over all elements of the given tensors (None entries skipped).

    Returns None when there is no tensor at all ("no gradient"). NaN/Inf elements
    are counted and left out of mean/std/min/max; ``norm`` includes them (so a
    NaN gradient has a NaN norm, as ``tensor.norm()`` would).
    """
    parts = [t.detach().reshape(-1) for t in tensors if t is not None]
    if not parts:
        return None
    g = parts[0] if len(parts) == 1 else torch.cat([p.to(parts[0].dtype) for p in parts])
    if g.is_complex():
        g = g.abs()
    g = g.double() if g.device.type != "mps" else g.float()
    n = g.numel()
    if n == 0:
        return {"norm": 0.0, "mean": None, "std": None, "min": None, "max": None,
                "zero_frac": 0.0, "nan": 0, "inf": 0, "numel": 0, "hist": None}
    finite = torch.isfinite(g)
    clean = torch.where(finite, g, torch.zeros((), dtype=g.dtype, device=g.device))
    big = torch.tensor(float("inf"), dtype=g.dtype, device=g.device)
    vec = torch.stack([
        torch.linalg.vector_norm(g),
        clean.sum(),
        (clean * clean).sum(),
        torch.where(finite, g, big).min(),
        torch.where(finite, g, -big).max(),
        (g == 0).sum().to(g.dtype),
        torch.isnan(g).sum().to(g.dtype),
        torch.isinf(g).sum().to(g.dtype),
        finite.sum().to(g.dtype),
    ]).cpu().tolist()
    norm, s, ss, lo, hi, zeros, nans, infs, nfinite = vec
    mean = s / nfinite if nfinite else float("nan")
    var = max(ss / nfinite - mean * mean, 0.0) if nfinite else float("nan")
    stats = {
        "norm": norm,
        "mean": _finite_or(mean),
        "std": _finite_or(math.sqrt(var)) if nfinite else None,
        "min": _finite_or(lo),
        "max": _finite_or(hi),
        "zero_frac": zeros / n,
        "nan": int(nans),
        "inf": int(infs),
        "numel": n,
        "hist": None,
    }
    if bins and nfinite and math.isfinite(lo) and math.isfinite(hi):
        stats["hist"] = histogram(g[finite] if nfinite < n else g, lo, hi, bins)
    return stats


def histogram(values: torch.Tensor, lo: float, hi: float, bins: int) -> dict:
    """Counts of values in ``bins`` equal bins over [lo, hi] (a single bin if lo == hi)."""
    if hi <= lo:
        return {"edges": [lo, lo], "counts": [int(values.numel())]}
    counts = torch.histc(values, bins=bins, min=lo, max=hi).cpu().numpy().astype(np.int64)
    edges = np.linspace(lo, hi, bins + 1)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def prefixed(stats: dict | None, prefix: str) -> dict:
    """{'grad_norm': ..., 'grad_mean': ...} from stats; all None when there are none."""
    if stats is None:
        return {f"{prefix}_{k}": None for k in (*STAT_KEYS, "hist")}
    return {f"{prefix}_{k}": v for k, v in stats.items()}
