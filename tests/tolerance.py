"""Tolerances from what floating point can promise for a value, not from the value itself (#31).

A statistic or an element of a tensor is computed through reductions whose rounding depends on the
kernel (a CPU build and a CUDA build of the same torch sum in different orders): each rounding can cost
``eps`` times the partial sums, so a result is known to about ``rel`` times the *magnitude of the numbers
it was computed from*, never to ``rel`` times itself. A bias gradient of a cross-entropy sums to zero
over the classes: its mean is float32 dust (3.35e-09 on one build, 1.96e-09 on another) whose error is
``eps`` times the gradient's size, and an absolute tolerance of 1e-9 on it fails on the next build.

So every comparison of a statistic or a gradient with a golden file or an oracle here takes its
absolute tolerance from the magnitude of the tensor it summarises (``magnitude``: its largest
absolute value), and its relative one from the precision of the computation (``rel``).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)


def float32_rel(terms: int) -> float:
    """Higham's bound for a float32 sum of ``terms`` numbers in any order, relative to their size: terms * eps."""
    return terms * EPS32


def approx_of(want: float, magnitude: float, rel: float):
    """``pytest.approx`` for a value computed from numbers of size ``magnitude``: ``rel`` of that size."""
    magnitude = abs(float(magnitude)) if magnitude is not None and math.isfinite(magnitude) else 0.0
    return pytest.approx(want, rel=rel, abs=rel * magnitude)


def magnitude_of(stats: dict, prefix: str = "grad") -> float:
    """The largest absolute value of the tensor a node's statistics describe (from its min and max)."""
    ends = (stats.get(f"{prefix}_min"), stats.get(f"{prefix}_max"))
    return max((abs(v) for v in ends if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0)


def assert_close_to_magnitude(got, want, rtol: float) -> None:
    """Arrays (numpy or torch) equal to ``rtol`` of ``want``'s magnitude, elementwise."""
    got = got.detach().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
    want = want.detach().cpu().numpy() if hasattr(want, "detach") else np.asarray(want)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)
