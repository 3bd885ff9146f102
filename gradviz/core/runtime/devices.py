"""Where a model lives, moving batches (tensors in tuples, lists, dicts) there, and how many CPU threads train it."""
from __future__ import annotations

import os
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


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def resolve_device(name: str | None) -> torch.device:
    name = (name or "auto").lower()
    if name == "auto":
        devices = available_devices()
        return torch.device("cuda" if "cuda" in devices else "mps" if "mps" in devices else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but CUDA is not available")
    if name == "mps" and "mps" not in available_devices():
        raise ValueError("device 'mps' was asked for but MPS is not available")
    return torch.device(name)


def to_device(obj: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """``obj`` with every tensor inside it moved to ``device`` (other values unchanged)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=non_blocking)
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(o, device, non_blocking) for o in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device, non_blocking) for k, v in obj.items()}
    return obj


_TORCH_DEFAULT_THREADS = torch.get_num_threads()     # torch's own choice (physical cores), before any change


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def training_threads() -> int:
    """Intra-op threads for training on the CPU (the window's worker and ``gradviz train``):
    ``OMP_NUM_THREADS`` when the user set it, else all cores this process may use but one.

    torch's default takes every core; when one of them is busy (another process, the GUI
    thread) its workers spin at every parallel region waiting for the slowest: on a 2-core
    machine with one core busy, ``gradviz train`` on the digits MLP fell from ~2,600 to
    6.8 steps/s. One core left free costs a few per cent when the machine is idle."""
    wanted = os.environ.get("OMP_NUM_THREADS", "").strip()
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    return max(1, min(_TORCH_DEFAULT_THREADS, _cores() - 1))
