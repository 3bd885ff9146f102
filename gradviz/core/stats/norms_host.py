"""The ``host`` and ``native`` norm strategies of ``StepStats``: CPU tensors reduced on the host.

On the CPU the "device" is the host: numpy's BLAS dot product on a view of a tensor runs
the same reduction as torch with a fraction of torch's per-call dispatch cost (~1 us
against several). Squared norms are kept as host numbers; ``step_columns`` roots and sums
them in float64. ``NativeNorms`` reads the common step (gradient norms only, every
gradient present) with one C++ call (~2 us on the digits MLP against ~10-20 us of numpy
calls) and is the host strategy otherwise.
"""
from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import torch
from torch.nn.utils import clip_grads_with_norm_

from gradviz.core.stats.step_numbers import StepNumbers, present_grads
from gradviz.core.stats.tensors import flat_view

__all__ = ["HostNorms", "NativeNorms"]

_vdot = np.vdot                  # flattens C-contiguous arrays itself (no reshape call)
_numpy = torch.Tensor.numpy
BATCH_VECTORS_FROM = 16          # read the norms of this many 1-d gradients or more with one torch.cat


class HostNorms:
    """numpy reductions on views of CPU float32/float64 parameters (see the module docstring)."""

    name = "host"

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.n = len(params)
        self.device = torch.device("cpu")
        self._views: list[np.ndarray] | None = None      # views of the parameters (re-made after p.data = ...)
        self._view_ptrs: list[int] = []
        self._snapshot: list[np.ndarray] | None = None   # the weights before the update
        self._tmp = [np.empty(p.numel(), dtype=np.float32 if p.dtype == torch.float32 else np.float64)
                     for p in params]
        # many 1-d parameters (biases, norm weights: 122 of 197 on GPT-12): one torch.cat and one
        # numpy reduction for all of them instead of a call each (310 -> 190 us on GPT-12)
        vectors = [i for i, p in enumerate(params) if p.dim() == 1]
        self.batched: tuple | None = None
        if len(vectors) >= BATCH_VECTORS_FROM:
            others = [i for i in range(self.n) if i not in set(vectors)]
            starts = np.cumsum([0] + [params[i].numel() for i in vectors[:-1]]).astype(np.intp)
            self.batched = (vectors, np.asarray(vectors, dtype=np.intp), starts, others,
                            np.asarray(others, dtype=np.intp))

    # -- the strategy -----------------------------------------------------
    def measure(self, max_norm: float | None, updates: bool) -> tuple[StepNumbers, torch.Tensor | None]:
        if max_norm is None and not updates:
            sq = self.grad_sq()
            if sq is not None:                    # the common step: every gradient there
                return StepNumbers(sq, True, self.n, self.n), None
        grads, present = present_grads(self.params)
        views = self._param_views()
        sq = [np.dot(g, g) for g in map(flat_view, grads)]
        if updates:                               # weight norms are only needed for the ratios
            sq += [np.dot(v, v) for v in views]
        numbers = StepNumbers(sq, True, self.n, len(grads), present, weights=updates)
        total = None
        if max_norm is not None and grads:
            total = torch.tensor(math.sqrt(math.fsum(sq[:len(grads)])), dtype=torch.float32)
            clip_grads_with_norm_([p for p in self.params if p.grad is not None], max_norm, total, foreach=None)
            numbers.max_norm = float(max_norm)
        if updates:
            if self._snapshot is None:
                self._snapshot = [v.copy() for v in views]
            else:
                for dst, v in zip(self._snapshot, views):
                    np.copyto(dst, v)
        return numbers, total

    def measure_update(self, numbers: StepNumbers) -> None:
        if self._snapshot is None or not numbers.weights:
            return
        dot, subtract, sq = np.dot, np.subtract, numbers.values
        for before, now, tmp in zip(self._snapshot, self._views, self._tmp):
            subtract(before, now, out=tmp)
            sq.append(dot(tmp, tmp))
        numbers.deltas = True

    def restore(self) -> bool:
        if self._snapshot is None:
            return False
        for view, saved in zip(self._param_views(), self._snapshot):
            np.copyto(view, saved)
        return True

    # -- helpers ----------------------------------------------------------
    def grad_sq(self) -> list | np.ndarray | None:
        """Squared norms of every gradient with as few Python calls as possible; None when a
        gradient is missing or cannot be viewed (the general path handles it)."""
        try:
            if self.batched is None:
                return [_vdot(a, a) for a in map(_numpy, [p.grad for p in self.params])]
            return self._grad_sq_batched()
        except (TypeError, RuntimeError, ValueError):     # a None grad / a grad needing grad
            return None

    def _grad_sq_batched(self) -> np.ndarray:
        """BLAS dots for the matrices, one concatenation and one segmented sum for the 1-d gradients."""
        vectors, vector_at, starts, others, other_at = self.batched
        grads = [p.grad for p in self.params]
        sq = np.empty(self.n)
        if others:
            sq[other_at] = [_vdot(a, a) for a in map(_numpy, [grads[i] for i in others])]
        flat = _numpy(torch.cat([grads[i] for i in vectors])).astype(np.float64)
        sq[vector_at] = np.add.reduceat(flat * flat, starts)
        return sq

    def _param_views(self) -> list[np.ndarray]:
        ptrs = [p.data_ptr() for p in self.params]
        if self._views is None or ptrs != self._view_ptrs:      # re-created after p.data = ... / .to()
            self._views = [flat_view(p) for p in self.params]
            self._view_ptrs = ptrs
            self._snapshot = None
        return self._views


class NativeNorms(HostNorms):
    """The host strategy with the common step read by the native accelerator in one call."""

    name = "native"

    def __init__(self, params: list[torch.Tensor], module: ModuleType) -> None:
        super().__init__(params)
        self._native_sq = module.GradNorms(params).sq

    def grad_sq(self) -> list | np.ndarray | None:
        sq = self._native_sq()                 # None: a gradient is missing (or not a host float)
        return sq if sq is not None else super().grad_sq()
