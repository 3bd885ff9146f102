"""``StepStats``' CPU fast path: numpy/BLAS reductions on views of the tensors, lazy rows.

Mixed into ``gradviz.core.stepstats.StepStats`` (see there for the row layout); the
methods use its ``params``, ``n``, ``_present``, ``_n_grads``, ``_updates_now``... state.
"""
from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
from torch.nn.utils import clip_grads_with_norm_

from gradviz.core.stats import norm_values

__all__ = ["NumpyPath"]

_NAN = float("nan")


def _flat(t: torch.Tensor) -> np.ndarray:
    """A 1-d numpy view of a CPU tensor (a copy only when it is not contiguous), or of the
    values of a sparse one (same norm)."""
    t = norm_values(t)
    try:
        return t.numpy().reshape(-1)
    except RuntimeError:                  # requires grad, conj/neg bit...
        return t.detach().resolve_conj().resolve_neg().numpy().reshape(-1)


class NumpyPath:
    """The CPU fast path of ``StepStats`` (a mixin)."""

    # -- CPU fast path ----------------------------------------------------
    # BLAS dot products on numpy views of the tensors (no copies): ~1 us per call against
    # several for a torch dispatch; squared norms are summed and rooted in float64 on the host.
    def _param_views(self) -> list[np.ndarray]:
        ptrs = [p.data_ptr() for p in self.params]
        if self._views is None or ptrs != self._view_ptrs:      # re-created after p.data = ... / .to()
            self._views = [_flat(p) for p in self.params]
            self._view_ptrs = ptrs
            self._np_snapshot = None
        return self._views

    def _grads_ready_numpy(self, grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor | None:
        views = self._param_views()
        dot = np.dot
        sq = [dot(g, g) for g in map(_flat, grads)]
        if self._updates_now:                  # weight norms are only needed for the ratios
            sq += [dot(v, v) for v in views]
        self._host_sq = sq
        total = None
        if max_norm is not None and grads:
            total_f = math.sqrt(math.fsum(sq[:len(grads)]))
            total = torch.tensor(total_f, dtype=torch.float32)
            clip_grads_with_norm_([self.params[i] for i in self._present], max_norm, total, foreach=None)
            self._max_norm = float(max_norm)
        if self._updates_now:
            snap = self._np_snapshot
            if snap is None:
                self._np_snapshot = [v.copy() for v in views]
            else:
                copyto = np.copyto
                for dst, v in zip(snap, views):
                    copyto(dst, v)
        return total

    def _after_update_numpy(self) -> None:
        snap = self._np_snapshot
        if not self._updates_now or snap is None:
            return
        dot, subtract = np.dot, np.subtract
        sq = self._host_sq
        for d, v, t in zip(snap, self._views, self._np_tmp):
            subtract(d, v, out=t)
            sq.append(dot(t, t))
        self._have_delta = True

    def _finish_numpy(self, loss: Any, lr: float | None) -> dict:
        # the same row as finish(), with as few numpy calls as possible (this runs every step)
        return self.build_row(self.capture(loss, lr))

    def capture(self, loss: Any, lr: float | None) -> tuple:
        """CPU fast path: the step's numbers for a row built later by ``build_row`` (no numpy work).

        Call instead of ``finish`` (after ``grads_ready`` / ``after_update``); ``step_time`` is
        taken now. ``build_row(capture(...))`` equals what ``finish`` returns.
        """
        if isinstance(loss, torch.Tensor):
            loss_value = loss.item()
        else:
            loss_value = _NAN if loss is None else float(loss)
        g = self._n_grads
        return (self._host_sq, g, self._present if g != self.n else None, self._have_delta, self._max_norm,
                loss_value, _NAN if lr is None else float(lr), time.perf_counter() - self._t0)

    def build_row(self, captured: tuple) -> dict:
        """The row of a ``capture`` result (see ``finish``)."""
        sq, g, present, have_delta, max_norm, loss_value, lr, step_time = captured
        n = self.n
        total_sq = math.fsum(sq[:g]) if g else 0.0
        values = np.sqrt(np.array(sq, dtype=np.float64))
        if g == n:
            param_norms = values[:n]
            has_grad = self._all_true
        else:
            param_norms = np.full(n, _NAN)
            has_grad = np.zeros(n, dtype=bool)
            if g:
                idx = present
                param_norms[idx] = values[:g]
                has_grad[idx] = True
        weight_norms = values[g:g + n] if len(values) >= g + n else self._all_nan
        if have_delta:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = values[g + n:] / weight_norms
        else:
            ratios = self._all_nan          # not measured this step
        if math.isfinite(total_sq):
            total, nonfinite = math.sqrt(total_sq), 0
        else:
            total = float(np.linalg.norm(values[:g]))
            nonfinite = int(np.count_nonzero(~np.isfinite(values[:g])))
        clipped = total
        if max_norm is not None and math.isfinite(total):
            clipped = total * min(1.0, max_norm / (total + 1e-6))
        return {
            "loss": loss_value, "grad_norm": total, "grad_norm_clipped": clipped, "param_norms": param_norms,
            "has_grad": has_grad, "weight_norms": weight_norms, "update_ratios": ratios,
            "lr": lr, "step_time": step_time, "nonfinite": nonfinite,
        }

    def build_columns(self, captured: list[tuple]) -> dict | None:
        """Many ``capture`` results at once: the columns ``build_row`` would give, stacked.

        Returns float64 ``loss``, ``grad_norm``, ``grad_norm_clipped``, ``lr``, ``step_time``
        (R), ``param_norms``, ``weight_norms``, ``update_ratios`` (R x n) and int64
        ``nonfinite``; None when some step lacked a gradient (build those rows one by one).
        """
        n, r_count = self.n, len(captured)
        if not r_count or any(c[1] != n for c in captured):
            return None
        norms = np.empty((r_count, n))
        weights = np.full((r_count, n), _NAN)
        ratios = np.full((r_count, n), _NAN)
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(captured):
            groups.setdefault((len(c[0]), c[3]), []).append(i)
        for (length, have_delta), idx in groups.items():
            block = np.sqrt(np.array([captured[i][0] for i in idx], dtype=np.float64).reshape(len(idx), length))
            norms[idx] = block[:, :n]
            if length >= 2 * n:
                weights[idx] = block[:, n:2 * n]
                if have_delta:
                    with np.errstate(divide="ignore", invalid="ignore"):
                        ratios[idx] = block[:, 2 * n:] / block[:, n:2 * n]
        fsum, sqrt, isfinite = math.fsum, math.sqrt, math.isfinite
        total = np.empty(r_count)
        clipped = np.empty(r_count)
        nonfinite = np.zeros(r_count, dtype=np.int64)
        for i, c in enumerate(captured):
            t_sq = fsum(c[0][:n])
            if isfinite(t_sq):
                t = sqrt(t_sq)
            else:
                t = float(np.linalg.norm(norms[i]))
                nonfinite[i] = int(np.count_nonzero(~np.isfinite(norms[i])))
            total[i] = t
            max_norm = c[4]
            clipped[i] = t * min(1.0, max_norm / (t + 1e-6)) if (max_norm is not None and isfinite(t)) else t
        return {"loss": np.array([c[5] for c in captured], dtype=np.float64), "grad_norm": total,
                "grad_norm_clipped": clipped, "param_norms": norms, "weight_norms": weights,
                "update_ratios": ratios, "lr": np.array([c[6] for c in captured], dtype=np.float64),
                "step_time": np.array([c[7] for c in captured], dtype=np.float64), "nonfinite": nonfinite}
