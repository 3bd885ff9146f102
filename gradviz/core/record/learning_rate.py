"""The learning rate a watch records: the first parameter group's, as a float (a tensor lr included)."""
from __future__ import annotations

import torch


def lr_of(optimizer) -> float | None:
    if optimizer is None:
        return None
    try:
        lr = optimizer.param_groups[0]["lr"]
        return float(lr.item() if isinstance(lr, torch.Tensor) else lr)
    except (IndexError, KeyError, TypeError, ValueError, RuntimeError):   # no usable lr: recorded as none
        return None
