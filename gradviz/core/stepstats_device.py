"""``StepStats``' device path: ``torch._foreach_*`` reductions, one stacked host copy per step.

Mixed into ``gradviz.core.stepstats.StepStats`` (see there for the row layout).
``after_update`` and ``finish`` are the public methods; on the CPU fast path they hand
over to ``gradviz.core.stepstats_cpu.NumpyPath`` on their first line.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch.nn.utils import clip_grads_with_norm_

from gradviz.core.stats import norm_values

__all__ = ["TorchPath"]

_NAN = float("nan")


class TorchPath:
    """The device path of ``StepStats`` (a mixin)."""

    def _grads_ready_torch(self, grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor | None:
        params = self.params
        if any(g.layout != torch.strided for g in grads):      # sparse gradients: their values' norms
            grads = [norm_values(g) for g in grads]
        norms = torch._foreach_norm(grads + params) if (grads or params) else []
        self._pending = list(norms)
        total = None
        if max_norm is not None and grads:
            total = torch.linalg.vector_norm(torch.stack(self._same(norms[:len(grads)])))
            clip_grads_with_norm_([params[i] for i in self._present], max_norm, total, foreach=None)
            self._max_norm = float(max_norm)
        if self._updates_now and params:
            if self._snapshot is None:
                self._snapshot = [p.detach().clone() for p in params]
            else:
                torch._foreach_copy_(self._snapshot, params)
        return total

    def after_update(self) -> None:
        """Call after ``optimizer.step()``: the per-parameter norms of the update."""
        if self._numpy:
            self._after_update_numpy()
            return
        if not self._updates_now or self._snapshot is None:
            return
        with torch.no_grad():
            deltas = torch._foreach_sub(self._snapshot, self.params)   # snapshot stays intact (restore_weights)
            self._pending.extend(torch._foreach_norm(deltas))
        self._have_delta = True

    def finish(self, loss: Any, lr: float | None = None) -> dict:
        """The step's row: one host copy of everything computed on the device."""
        if self._numpy:
            return self._finish_numpy(loss, lr)
        parts = list(self._pending)
        host_loss = None
        if self._numpy:
            host_loss = float(loss.detach().reshape(())) if isinstance(loss, torch.Tensor) else (
                _NAN if loss is None else float(loss))
            parts = []
        elif isinstance(loss, torch.Tensor):
            parts.append(loss.detach().reshape(()))
        else:
            host_loss = _NAN if loss is None else float(loss)
        if parts:
            with torch.no_grad():
                stacked = torch.stack(self._same(parts))
            values = self._to_host(stacked)
        elif self._numpy:
            values = np.sqrt(np.array(self._host_sq, dtype=np.float64))
        else:
            values = np.zeros(0)
        g = self._n_grads
        n = self.n
        grad_present = values[:g]
        weight_norms = values[g:g + n] if len(values) >= g + n else np.full(n, _NAN)
        if self._have_delta:
            deltas = values[g + n:g + 2 * n]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = deltas / weight_norms
        else:
            ratios = np.full(n, _NAN)
        loss_value = float(values[-1]) if host_loss is None else host_loss
        if g == n:
            param_norms = grad_present.copy()
            has_grad = np.ones(n, dtype=bool)
        else:
            param_norms = np.full(n, _NAN)
            has_grad = np.zeros(n, dtype=bool)
            if g:
                idx = np.asarray(self._present)
                param_norms[idx] = grad_present
                has_grad[idx] = True
        total = math.sqrt(float(np.dot(grad_present, grad_present))) if g else 0.0
        nonfinite = 0
        if not math.isfinite(total):
            bad = ~np.isfinite(grad_present)
            nonfinite = int(np.count_nonzero(bad))
            if nonfinite:
                total = float(np.linalg.norm(grad_present))     # propagates NaN / inf like torch
        clipped = total
        if self._max_norm is not None and math.isfinite(total):
            clipped = total * min(1.0, self._max_norm / (total + 1e-6))
        return {
            "loss": loss_value,
            "grad_norm": total,
            "grad_norm_clipped": clipped,
            "param_norms": param_norms,
            "has_grad": has_grad,
            "weight_norms": weight_norms,
            "update_ratios": ratios,
            "lr": _NAN if lr is None else float(lr),
            "step_time": time.perf_counter() - self._t0,
            "nonfinite": nonfinite,
        }

    # -- helpers ----------------------------------------------------------
    def _same(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Make 0-d tensors stackable (one dtype, one device) only when they are not already."""
        if not (self._multi_device or self._mixed_dtypes):
            t0 = tensors[0]
            if all(t.dtype == t0.dtype and t.device == t0.device for t in tensors[-1:]):
                return tensors
        return [t.to(device=self.device, dtype=torch.float32) for t in tensors]

    def _to_host(self, stacked: torch.Tensor) -> np.ndarray:
        if stacked.device.type == "cpu":
            return stacked.to(torch.float64).numpy()
        if stacked.device.type == "cuda":
            if self._pinned is None or self._pinned.shape != stacked.shape or self._pinned.dtype != stacked.dtype:
                self._pinned = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
            self._pinned.copy_(stacked, non_blocking=True)
            torch.cuda.current_stream(stacked.device).synchronize()
            return self._pinned.to(torch.float64).numpy().copy()
        return stacked.to("cpu", torch.float64).numpy()
