"""Where a model lives, and moving batches (tensors in tuples, lists, dicts) there."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (or buffer); CPU for an empty model."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


def to_device(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``obj`` with every tensor inside it moved to ``device`` (other values unchanged)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(o, device, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    return obj
