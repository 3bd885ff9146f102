"""The tolerance rule of tests/tolerance.py holds against what float32 really does (#31).

Two builds of torch compute the same gradient with different kernels, i.e. different summation
orders. Here the orders are made explicit: a cross-entropy bias gradient (its elements sum to zero
over the classes, so their mean is rounding dust) is reduced over the batch in float32 in three
orders, as three kernels might. The means differ by more than a fixed absolute tolerance of 1e-9
allows, and by far less than the magnitude rule's bound.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tolerance import approx_of, float32_rel


def float32_sum(values: np.ndarray, order: str) -> np.float32:
    if order == "pairwise":
        return np.sum(values, dtype=np.float32)            # numpy's pairwise summation
    total = np.float32(0)
    for v in (values if order == "forward" else values[::-1]):
        total = np.float32(total + v)
    return total


def bias_gradient_means(batch: int = 512, classes: int = 10, seed: int = 0) -> tuple[dict[str, float], float]:
    """The mean of a cross-entropy bias gradient, its batch sums taken in three orders; and the gradient's size."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, classes, generator=g) * 3).requires_grad_()
    F.cross_entropy(logits, torch.randint(classes, (batch,), generator=g)).backward()
    per_example = logits.grad.numpy().astype(np.float32)
    means, size = {}, 0.0
    for order in ("forward", "backward", "pairwise"):
        bias_grad = np.array([float32_sum(per_example[:, j], order) for j in range(classes)], dtype=np.float32)
        means[order] = float(bias_grad.mean(dtype=np.float64))
        size = max(size, float(np.abs(bias_grad).max()))
    return means, size


def test_summation_order_moves_a_zero_mean_beyond_a_fixed_absolute_tolerance():
    means, size = bias_gradient_means()
    spread = max(means.values()) - min(means.values())
    assert spread > 1e-9, means                              # a fixed abs=1e-9 fails across "builds"
    for mean in means.values():                              # the magnitude rule holds, with Higham's bound
        assert mean == approx_of(means["forward"], size, float32_rel(512))
