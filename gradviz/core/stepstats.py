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

The reductions live in two mixins: ``gradviz.core.stepstats_cpu.NumpyPath`` (CPU fast
path: numpy/BLAS on views of the tensors, rows built lazily by ``capture``/``build_row``)
and ``gradviz.core.stepstats_device.TorchPath`` (foreach kernels, one stacked host copy;
``after_update`` and ``finish`` hand over to the CPU path on their first line).
"""
from __future__ import annotations

import time
from typing import Iterable

import numpy as np
import torch

from gradviz.core.stepstats_cpu import NumpyPath
from gradviz.core.stepstats_device import TorchPath

__all__ = ["StepStats", "ROW_KEYS", "rows_from_raw"]


_vdot = np.vdot                    # flattens C-contiguous arrays itself (no reshape call)
_numpy = torch.Tensor.numpy

ROW_KEYS = ("loss", "grad_norm", "grad_norm_clipped", "param_norms", "has_grad", "weight_norms",
            "update_ratios", "lr", "step_time", "nonfinite")

_NAN = float("nan")
BATCH_VECTORS_FROM = 16          # read the norms of this many 1-d gradients or more with one torch.cat
NUMPY_MAX_NUMEL = 50_000_000     # CPU fast path up to this many parameter elements (2 extra copies)


class StepStats(NumpyPath, TorchPath):
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
        # many 1-d parameters (biases, norm weights: 122 of 197 on GPT-12): one torch.cat and one
        # numpy reduction for all of them instead of a call each (310 -> 190 us on GPT-12)
        vectors = [i for i, p in enumerate(self.params) if p.dim() == 1] if self._numpy else []
        self._vectors: tuple | None = None
        if len(vectors) >= BATCH_VECTORS_FROM:
            others = [i for i in range(self.n) if i not in set(vectors)]
            starts = np.cumsum([0] + [self.params[i].numel() for i in vectors[:-1]]).astype(np.intp)
            self._vectors = (vectors, np.asarray(vectors, dtype=np.intp), starts, others,
                             np.asarray(others, dtype=np.intp))
        self._all_true = np.ones(self.n, dtype=bool)          # shared, read-only
        self._all_true.flags.writeable = False
        self._all_nan = np.full(self.n, _NAN)
        self._all_nan.flags.writeable = False
        # the native accelerator (gradviz.core.native), when built: all gradient norms in one
        # C++ call (~2 us on the digits MLP against ~10-20 us of numpy calls); None = numpy
        self._native_sq = None
        if self._numpy:
            from gradviz.core import native

            module = native.get()
            if module is not None:
                self._native_sq = module.GradNorms(self.params).sq

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
            if self._native_sq is not None:
                sq = self._native_sq()             # None: a gradient is missing (general path below)
                if sq is not None:
                    self._host_sq = sq
                    self._n_grads = self.n
                    return None
            try:
                if self._vectors is None:
                    self._host_sq = [_vdot(a, a) for a in map(_numpy, [p.grad for p in self.params])]
                else:
                    self._host_sq = self._grad_sq_batched()
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

    def _grad_sq_batched(self) -> np.ndarray:
        """Squared gradient norms (float64, in parameter order): BLAS dots for the matrices,
        one concatenation and one segmented sum for the 1-d gradients."""
        vectors, vector_at, starts, others, other_at = self._vectors
        grads = [p.grad for p in self.params]
        sq = np.empty(self.n)
        if others:
            sq[other_at] = [_vdot(a, a) for a in map(_numpy, [grads[i] for i in others])]
        flat = _numpy(torch.cat([grads[i] for i in vectors])).astype(np.float64)
        sq[vector_at] = np.add.reduceat(flat * flat, starts)
        return sq

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
    keys = [(squared, g, len(values), have_delta, None if present is None else tuple(present))
            for values, squared, g, present, have_delta in raws]
    groups: dict[tuple, list[int]] = {}
    if len(set(keys)) == 1:                      # the usual case: every row has the same layout
        groups[keys[0]] = list(range(r_count))
    else:
        for i, key in enumerate(keys):
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
