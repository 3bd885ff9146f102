"""What ``w.step(loss)`` accepts: a real number, or a tensor holding one value (checked at that call).

A wrong loss (a string, a list, a complex number, a tensor of several values, a meta tensor)
raises ``TypeError`` in the call that gave it, before the watch changes anything: the steps
before it stay recorded and the watch goes on with the next good one. (Found later, at a
commit, it would have cost the steps buffered with it.)
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

__all__ = ["step_loss"]


def step_loss(loss: Any, on_cpu: bool) -> float | torch.Tensor | None:
    """The loss as the row keeps it: a float, a detached one-value tensor (read at the commit,
    so a device loss costs no synchronisation per step), or None."""
    if loss is None or type(loss) is float:
        return loss
    if isinstance(loss, torch.Tensor):
        if on_cpu and loss.is_cpu and loss.numel() == 1:
            # the usual loss (a CPU scalar under a CPU watch): its value says the rest of the checks below
            # (is_cpu: not meta; a complex tensor gives a complex)
            value = loss.item()
            if type(value) is not complex:
                return value
        if loss.numel() != 1:
            raise TypeError(f"w.step(loss): the loss must hold one value, got a tensor of shape "
                            f"{tuple(loss.shape)} (reduce it first, e.g. loss.mean())")
        if loss.is_complex():
            raise TypeError(f"w.step(loss): the loss must be real, got a {loss.dtype} tensor")
        if loss.device.type == "meta":
            raise TypeError("w.step(loss): the loss is a meta tensor (it has no value to record)")
        return loss.item() if (on_cpu and loss.is_cpu) else loss.detach()
    if isinstance(loss, np.ndarray) and loss.size == 1 and loss.dtype.kind in "biuf":
        return float(loss.reshape(()))
    if isinstance(loss, numbers.Real) or (isinstance(loss, numbers.Number) and not isinstance(loss, numbers.Complex)):
        try:
            return float(loss)
        except (OverflowError, ValueError):          # an int too large for a float
            return float("inf") if loss > 0 else float("-inf")
    what = type(loss).__name__
    hint = " (a complex number)" if isinstance(loss, numbers.Complex) else ""
    raise TypeError(f"w.step(loss): the loss must be a number or a one-value tensor, got {what}{hint}")
