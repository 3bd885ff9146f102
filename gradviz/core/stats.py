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


def norm_values(t: torch.Tensor) -> torch.Tensor:
    """A strided tensor with the L2 norm of ``t``: ``t`` itself, a sparse COO tensor's
    coalesced values (an embedding's sparse gradient: duplicates summed, no densifying), or
    another layout densified."""
    if t.layout == torch.strided:
        return t
    if t.layout == torch.sparse_coo:
        return t.coalesce().values()
    return t.to_dense()


def _finite_or(value: float) -> float | None:
    return value if math.isfinite(value) else None


def tensor_stats(tensors: Iterable[torch.Tensor | None], bins: int = HIST_BINS) -> dict | None:
    """Stats over all elements of the given tensors (None entries skipped).

    Returns None when there is no tensor at all ("no gradient"). NaN/Inf elements
    are counted and left out of mean/std/min/max; ``norm`` includes them (so a
    NaN gradient has a NaN norm, as ``tensor.norm()`` would). Sums accumulate in
    float64 without copying the tensor; the common all-finite case costs five
    reductions and one host copy.
    """
    # a sparse gradient counts as the dense tensor it stands for (zeros included in the stats)
    parts = [(t if t.layout == torch.strided else t.to_dense()).detach().reshape(-1)
             for t in tensors if t is not None]
    if not parts:
        return None
    g = parts[0] if len(parts) == 1 else torch.cat([p.to(parts[0].dtype) for p in parts])
    if g.is_complex():
        g = g.abs()
    if not g.is_floating_point():
        g = g.double()
    n = g.numel()
    if n == 0:
        return {"norm": 0.0, "mean": None, "std": None, "min": None, "max": None,
                "zero_frac": 0.0, "nan": 0, "inf": 0, "numel": 0, "hist": None}
    acc = torch.float32 if g.device.type == "mps" else torch.float64
    lo, hi = torch.aminmax(g)
    norm, s, lo, hi, nonzero = torch.stack([
        torch.linalg.vector_norm(g, dtype=acc), g.sum(dtype=acc), lo.to(acc), hi.to(acc),
        torch.count_nonzero(g).to(acc)]).cpu().tolist()
    if math.isfinite(norm) and math.isfinite(lo) and math.isfinite(hi):
        nans = infs = 0
        nfinite, ss, finite_g = n, norm * norm, g
    else:  # rare: recount without the non-finite elements
        finite = torch.isfinite(g)
        finite_g = g[finite]
        nans = int(torch.isnan(g).sum())
        infs = int(torch.isinf(g).sum())
        nfinite = finite_g.numel()
        if nfinite:
            s, ss, lo, hi = torch.stack([finite_g.sum(dtype=acc), finite_g.to(acc).pow(2).sum(),
                                         finite_g.min().to(acc), finite_g.max().to(acc)]).cpu().tolist()
        else:
            s = ss = lo = hi = float("nan")
    mean = s / nfinite if nfinite else float("nan")
    var = max(ss / nfinite - mean * mean, 0.0) if nfinite else float("nan")
    stats = {
        "norm": norm,
        "mean": _finite_or(mean),
        "std": _finite_or(math.sqrt(var)) if nfinite else None,
        "min": _finite_or(lo),
        "max": _finite_or(hi),
        "zero_frac": (n - nonzero) / n,
        "nan": nans,
        "inf": infs,
        "numel": n,
        "hist": None,
    }
    if bins and nfinite and math.isfinite(lo) and math.isfinite(hi):
        stats["hist"] = histogram(finite_g, lo, hi, bins)
    return stats


def histogram(values: torch.Tensor, lo: float, hi: float, bins: int) -> dict:
    """Counts of values in ``bins`` equal bins over [lo, hi] (a single bin if lo == hi)."""
    if hi <= lo:
        return {"edges": [lo, lo], "counts": [int(values.numel())]}
    if not values.is_floating_point():
        values = values.double()
    # bincount of scaled values: ~2.5x faster than histc on the small tensors of a graph
    index = ((values - lo) * (bins / (hi - lo))).to(torch.int64).clamp_(0, bins - 1)
    counts = torch.bincount(index, minlength=bins).cpu().numpy().astype(np.int64)
    edges = np.linspace(lo, hi, bins + 1)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def prefixed(stats: dict | None, prefix: str) -> dict:
    """{'grad_norm': ..., 'grad_mean': ...} from stats; all None when there are none."""
    if stats is None:
        return {f"{prefix}_{k}": None for k in (*STAT_KEYS, "hist")}
    return {f"{prefix}_{k}": v for k, v in stats.items()}
