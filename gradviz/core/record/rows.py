"""Turning the recorder's buffered raw steps into stored rows (one numpy pass per commit)."""
from __future__ import annotations

import math

import numpy as np
import torch

from gradviz.core.record.schema import NO_VALUE, real
from gradviz.core.record.writer import RunWriter
from gradviz.core.stats.steps import step_columns

__all__ = ["store_rows"]

_ONE = np.ones(1)
_MISSING = np.full(1, NO_VALUE)


def store_rows(writer: RunWriter, rows: list[tuple], columns: tuple | None = None) -> None:
    """Hand buffered rows to ``writer`` (step rows and node norms), without committing.

    ``rows`` are the recorder's ``(step, time, loss, lr, StepStats.numbers(), updated, node)``
    tuples, ``node`` None or ``(graph id, selector, walk-order node norms)``. ``columns``:
    ``(column of each parameter, number of columns)`` when the file has columns of parameters
    the model no longer has (``model_follow``): those get ``NO_VALUE``.
    """
    arr = step_columns([r[4] for r in rows])
    losses = _losses([r[2] for r in rows])
    has = arr["has_grad"]
    grad_blobs = np.where(has, arr["param_norms"], NO_VALUE).astype("<f4")
    ratio_blobs = arr["update_ratios"].astype("<f4")
    deltas, weights = arr["update_norms"], arr["weight_norms"]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        num = np.sum(deltas * deltas, axis=1)
        den = np.sum(weights * weights, axis=1)
        global_ratio = np.sqrt(num / den)
    global_ratio = np.where(den > 0, global_ratio, np.where(num == 0, 0.0, np.inf))
    global_ratio = np.where(np.isnan(num) | np.isnan(den), np.nan, global_ratio)
    # the per-row work is column-wise (this runs for every step, ~1000 rows per commit)
    steps = [int(r[0]) for r in rows]
    updated = [bool(r[5]) for r in rows]
    nodes = [(i, r[6]) for i, r in enumerate(rows) if r[6] is not None]
    for i, (gid, sel, values) in nodes:
        full = np.concatenate([values, _ONE, np.where(has[i], arr["param_norms"][i], NO_VALUE), _MISSING])
        writer.add_node_norms(steps[i], gid, full[sel].astype("<f4").tobytes())
    if columns is not None:
        grad_blobs, ratio_blobs = _spread(grad_blobs, columns, NO_VALUE), _spread(ratio_blobs, columns, np.nan)
    width = grad_blobs.shape[1] * 4
    grad_bytes, ratio_bytes = grad_blobs.tobytes(), ratio_blobs.tobytes()
    offsets = range(0, width * len(rows), width) if width else [0] * len(rows)
    blobs = [grad_bytes[k:k + width] for k in offsets]
    ratio_list = [ratio_bytes[k:k + width] if u else None for u, k in zip(updated, offsets)]
    global_list = [real(g) if u else None for u, g in zip(updated, global_ratio.tolist())]
    sampled = [int(r[6] is not None) for r in rows]
    out = list(zip(steps, [float(r[1]) for r in rows], _reals(losses), _reals(arr["grad_norm"].tolist()),
                   _reals([r[3] for r in rows]), global_list, blobs, ratio_list, sampled))
    writer.add_step_rows(out)


def _spread(blobs: np.ndarray, columns: tuple, fill: float) -> np.ndarray:
    where, width = columns
    out = np.full((blobs.shape[0], width), fill, dtype="<f4")
    out[:, where] = blobs
    return out


def _reals(values: list) -> list:
    """``schema.real`` of each value, skipped when every value is already a finite float."""
    try:
        if all(type(v) is float for v in values) and math.isfinite(math.fsum(values)):
            return values
    except (OverflowError, TypeError, ValueError):        # (inf - inf in fsum)
        pass
    return [real(v) for v in values]


def _losses(values: list) -> list:
    """Host floats (or None) of the buffered losses: device tensors are stacked and copied once."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if tensors:
        try:
            with torch.no_grad():
                host = iter(torch.stack([t.reshape(()).to(tensors[0].device, torch.float64)
                                         for t in tensors]).cpu().tolist())
        except (RuntimeError, TypeError):     # losses on several devices / of odd shapes: one by one
            host = iter([float(t.reshape(())) if t.numel() == 1 else float("nan") for t in tensors])
        values = [next(host) if isinstance(v, torch.Tensor) else v for v in values]
    return [None if v is None else float(v) for v in values]

