"""Turning the recorder's buffered raw steps into stored rows (one numpy pass per commit)."""
from __future__ import annotations

import numpy as np
import torch

from gradviz.core.record.schema import NO_VALUE, real
from gradviz.core.record.writer import RunWriter
from gradviz.core.stepstats import rows_from_raw

__all__ = ["store_rows"]

_ONE = np.ones(1)
_MISSING = np.full(1, NO_VALUE)


def store_rows(writer: RunWriter, rows: list[tuple], n_params: int) -> None:
    """Hand buffered rows to ``writer`` (step rows and node norms), without committing.

    ``rows`` are the recorder's ``(step, time, loss, lr, StepStats.raw(), updated, node)``
    tuples, ``node`` None or ``(graph id, selector, walk-order node norms)``.
    """
    arr = rows_from_raw([r[4] for r in rows], n_params)
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
    grad_norm = arr["grad_norm"].tolist()
    out = []
    for i, (s, t, _, lr, _, updated, node) in enumerate(rows):
        if node is not None:
            gid, sel, values = node
            full = np.concatenate([values, _ONE, np.where(has[i], arr["param_norms"][i], NO_VALUE), _MISSING])
            picked = full[sel]
            writer.add_node_norms(s, gid, picked.astype("<f4").tobytes())
        out.append((int(s), float(t), real(losses[i]), real(grad_norm[i]), real(lr),
                    real(float(global_ratio[i])) if updated else None, grad_blobs[i].tobytes(),
                    ratio_blobs[i].tobytes() if updated else None, int(node is not None)))
    writer.add_step_rows(out)


def _losses(values: list) -> list:
    """Host floats (or None) of the buffered losses: device tensors are stacked and copied once."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if tensors:
        try:
            with torch.no_grad():
                host = iter(torch.stack([t.reshape(()).to(tensors[0].device, torch.float64)
                                         for t in tensors]).cpu().tolist())
        except Exception:
            host = iter([float(t.reshape(())) if t.numel() == 1 else float("nan") for t in tensors])
        values = [next(host) if isinstance(v, torch.Tensor) else v for v in values]
    return [None if v is None else float(v) for v in values]

