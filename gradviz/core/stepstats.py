"""Per-step training statistics, computed on the device in a batched way.

``StepStats`` sits around the optimizer step of any training loop::

    stats = StepStats(model.named_parameters())
    stats.begin()                                  # start of the step (timer)
    loss.backward()
    pre = stats.grads_ready(max_norm=1.0)          # per-param grad norms, clipping, snapshot of theta
    optimizer.step()
    stats.after_update()                           # ||delta theta|| per parameter
    row = stats.finish(loss, lr=optimizer.param_groups[0]["lr"])

Everything per parameter is done with ``torch._foreach_*`` kernels, the scalars
and vectors are stacked into ONE tensor and copied to the host once per step (no
per-parameter ``.item()``). Global norms, ratios and counts are then derived on the
host from those few numbers (numpy on arrays of a few hundred floats).

``finish`` returns a small dict of floats and numpy arrays (float64; index ``i``
refers to ``stats.names[i]``):

- ``loss``: the loss value (the mean over accumulated micro-batches, as given)
- ``grad_norm``: global L2 norm of all gradients before clipping (what
  ``torch.nn.utils.clip_grad_norm_`` returns)
- ``grad_norm_clipped``: global norm after clipping (== ``grad_norm`` without clipping)
- ``param_norms``: per-parameter gradient norms before clipping, ``p.grad.norm()``;
  NaN where ``p.grad`` is None (see ``has_grad``)
- ``has_grad``: bool array, False where ``p.grad`` was None
- ``weight_norms``: per-parameter ``||theta||`` before the update
- ``update_ratios``: per-parameter ``||theta_after - theta_before|| / ||theta_before||``
  (NaN when ``track_updates`` is off; ``inf`` for an all-zero parameter that moved)
- ``lr``: the learning rate given to ``finish`` (NaN when not given)
- ``step_time``: seconds from ``begin()`` to the end of ``finish()``
- ``nonfinite``: how many parameters have a NaN/Inf gradient norm
"""
from __future__ import annotations

import math
import time
from typing import Any, Iterable

import numpy as np
import torch
from torch.nn.utils import clip_grads_with_norm_

__all__ = ["StepStats", "ROW_KEYS", "rows_from_raw"]


def _flat(t: torch.Tensor) -> np.ndarray:
    """A 1-d numpy view of a CPU tensor (a copy only when it is not contiguous)."""
    try:
        return t.numpy().reshape(-1)
    except RuntimeError:                  # requires grad, conj/neg bit...
        return t.detach().resolve_conj().resolve_neg().numpy().reshape(-1)

_vdot = np.vdot                    # flattens C-contiguous arrays itself (no reshape call)
_numpy = torch.Tensor.numpy

ROW_KEYS = ("loss", "grad_norm", "grad_norm_clipped", "param_norms", "has_grad", "weight_norms",
            "update_ratios", "lr", "step_time", "nonfinite")

_NAN = float("nan")
NUMPY_MAX_NUMEL = 50_000_000     # CPU fast path up to this many parameter elements (2 extra copies)


class StepStats:
    """Batched per-step statistics of a fixed list of named parameters.

    Only parameters with ``requires_grad`` are tracked. ``track_updates=False``
    skips the snapshot of the weights (saves one copy of the parameters in memory
    and two kernels per step); ``update_ratios`` are then NaN.
    """

    def __init__(self, named_parameters: Iterable[tuple[str, torch.Tensor]], *, track_updates: bool = True) -> None:
        pairs = [(n, p) for n, p in named_parameters if p.requires_grad]
        self.names: list[str] = [n for n, _ in pairs]
        self.params: list[torch.Tensor] = [p for _, p in pairs]
        self.track_updates = track_updates
        self._updates_now = track_updates
        self.n = len(self.params)
        devices = {p.device for p in self.params}
        self.device = next(iter(devices)) if len(devices) == 1 else (
            self.params[0].device if self.params else torch.device("cpu"))
        self._multi_device = len(devices) > 1
        self._mixed_dtypes = len({p.dtype for p in self.params}) > 1
        self._snapshot: list[torch.Tensor] | None = None
        self._present: list[int] = []
        self._present_key: tuple[bool, ...] | None = None
        self._pending: list[torch.Tensor] = []
        self._n_grads = 0
        self._have_delta = False
        self._max_norm: float | None = None
        self._t0 = time.perf_counter()
        self._pinned: torch.Tensor | None = None
        # CPU fast path: on the CPU the "device" is the host, and numpy's BLAS dot on views of the
        # tensors runs the same reductions with a fraction of torch's per-call dispatch cost
        self._numpy = (self.device.type == "cpu" and not self._multi_device and bool(self.params)
                       and all(p.dtype in (torch.float32, torch.float64) and p.layout == torch.strided
                               for p in self.params))
        sizes = [p.numel() for p in self.params]
        self._numpy = self._numpy and 0 not in sizes and sum(sizes) <= NUMPY_MAX_NUMEL
        self._sizes = sizes
        self._views: list[np.ndarray] | None = None
        self._view_ptrs: list[int] = []
        self._np_snapshot: list[np.ndarray] | None = None
        self._np_tmp = [np.empty(n_, dtype=np.float32 if p.dtype == torch.float32 else np.float64)
                        for n_, p in zip(sizes, self.params)] if self._numpy else []
        self._host_sq: list = []
        self._all_true = np.ones(self.n, dtype=bool)          # shared, read-only
        self._all_true.flags.writeable = False
        self._all_nan = np.full(self.n, _NAN)
        self._all_nan.flags.writeable = False

    # -- the step ---------------------------------------------------------
    def begin(self) -> None:
        """Mark the start of a step (for ``step_time``) and forget the last one."""
        self._t0 = time.perf_counter()
        self._pending = []
        self._n_grads = 0
        self._have_delta = False
        self._max_norm = None

    def grads_ready(self, max_norm: float | None = None, updates: bool = True) -> torch.Tensor | None:
        """Call after backward (and after ``GradScaler.unscale_``), before ``optimizer.step()``.

        Computes every gradient norm and every weight norm in one foreach kernel,
        clips when ``max_norm`` is given (exactly ``clip_grad_norm_``: the same
        coefficient ``max_norm / (total + 1e-6)`` clamped to 1, applied with
        ``clip_grads_with_norm_``) and snapshots the weights. Returns the pre-clip
        global norm as a device tensor when clipping (else None: no extra kernel).
        ``updates=False`` skips the update ratios for this step (NaN in the row).
        """
        self._updates_now = upd = self.track_updates and updates
        if self._numpy and max_norm is None and not upd:
            # the common cheap step: gradient norms only, with as few Python calls as possible
            try:
                self._host_sq = [_vdot(a, a) for a in map(_numpy, [p.grad for p in self.params])]
            except (TypeError, RuntimeError, ValueError):     # a None grad / a grad needing grad: below
                pass
            else:
                self._n_grads = self.n
                return None
        params = self.params
        grads = [p.grad for p in params]
        key = tuple(i for i, g in enumerate(grads) if g is None)      # usually (): every grad there
        if key != self._present_key:
            self._present_key = key
            self._present = [i for i, g in enumerate(grads) if g is not None]
        if key:
            grads = [g for g in grads if g is not None]
        self._n_grads = len(grads)
        if self._numpy:
            return self._grads_ready_numpy(grads, max_norm)
        with torch.no_grad():
            return self._grads_ready_torch(grads, max_norm)

    def _grads_ready_torch(self, grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor | None:
        params = self.params
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

    def restore_weights(self) -> bool:
        """Put back the weights from before the last update (e.g. after a NaN loss).

        Only possible between ``grads_ready`` and the next step, with updates tracked;
        returns False when there is nothing to restore.
        """
        if not self._updates_now:
            return False                  # this step took no snapshot
        if self._numpy and self._np_snapshot is not None:
            for view, saved in zip(self._param_views(), self._np_snapshot):
                np.copyto(view, saved)
            self._have_delta = False
            return True
        if self._snapshot is None:
            return False
        with torch.no_grad():
            torch._foreach_copy_(self.params, self._snapshot)
        self._have_delta = False
        return True

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

    # -- batched consumers (the recorder) -----------------------------------
    def raw(self) -> tuple:
        """The step's numbers as computed, with no host work: for consumers that batch rows.

        Call instead of ``finish`` (after ``grads_ready`` and, when the optimizer ran,
        ``after_update``). Returns ``(values, squared, n_grads, present, have_delta)``:
        ``values`` is a list of numpy scalars (CPU fast path, ``squared`` True: squared
        norms) or a 1-d device tensor of norms (no host sync); the layout is ``n_grads``
        gradient norms (of ``present``, the indices that had a gradient; ``None`` = all),
        then, when the weights were measured, ``n`` weight norms and, when
        ``have_delta``, ``n`` update norms. Convert many at once with ``rows_from_raw``.
        """
        present = None if self._n_grads == self.n else list(self._present)
        if self._numpy:
            return self._host_sq, True, self._n_grads, present, self._have_delta
        parts = self._pending
        if parts:
            with torch.no_grad():
                values = torch.stack(self._same(parts))
        else:
            values = torch.zeros(0)
        return values, False, self._n_grads, present, self._have_delta

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


def rows_from_raw(raws: list[tuple], n: int) -> dict[str, np.ndarray]:
    """Arrays (one row per ``StepStats.raw()`` result) of the per-step numbers.

    Returns float64 arrays ``param_norms`` (R x n, NaN = no gradient), ``has_grad``
    (bool, R x n), ``grad_norm`` (R; global L2 norm, NaN/inf propagate like torch),
    ``weight_norms`` and ``update_norms`` (R x n, NaN = not measured) and
    ``update_ratios`` (R x n, ``update_norms / weight_norms``). One host copy per
    group of rows with the same layout (device tensors are stacked first).
    """
    r_count = len(raws)
    norms = np.full((r_count, n), _NAN)
    weights = np.full((r_count, n), _NAN)
    deltas = np.full((r_count, n), _NAN)
    has = np.ones((r_count, n), dtype=bool)
    groups: dict[tuple, list[int]] = {}
    for i, (values, squared, g, present, have_delta) in enumerate(raws):
        key = (squared, g, len(values), have_delta, None if present is None else tuple(present))
        groups.setdefault(key, []).append(i)
    for (squared, g, length, have_delta, present), idx in groups.items():
        if squared:
            block = np.sqrt(np.array([raws[i][0] for i in idx], dtype=np.float64).reshape(len(idx), length))
        else:
            with torch.no_grad():
                block = torch.stack([raws[i][0] for i in idx]).to("cpu", torch.float64).numpy().reshape(len(idx), length)
        rows = np.asarray(idx)
        if present is None:
            norms[rows] = block[:, :g]
        else:
            has[rows] = False
            if g:
                cols = np.asarray(present)
                sub = norms[rows]
                sub[:, cols] = block[:, :g]
                norms[rows] = sub
                hsub = has[rows]
                hsub[:, cols] = True
                has[rows] = hsub
        if length >= g + n:
            weights[rows] = block[:, g:g + n]
            if have_delta and length >= g + 2 * n:
                deltas[rows] = block[:, g + n:g + 2 * n]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        grad_norm = np.sqrt(np.sum(np.where(has, norms, 0.0) ** 2, axis=1))
        ratios = deltas / weights
    return {"param_norms": norms, "has_grad": has, "grad_norm": grad_norm, "weight_norms": weights,
            "update_norms": deltas, "update_ratios": ratios}
