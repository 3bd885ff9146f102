"""Build a script's model for real, but stop before it outgrows this machine's memory.

To offer a structure-only trace when a model would not fit, gradviz could first build it on
the meta device to count its parameters; but a meta build of even a small model pulls in
PyTorch's Python reference kernels (``torch._refs``, and ``torch._dynamo`` behind them:
a second of CPU before any real work). Instead the real build runs under a
``TorchFunctionMode`` that reads the process's resident memory after every call producing
a tensor of 1 MB or more, and raises ``TooBig`` (a ``Stopped``: gradviz's own stop, which
passes through the script wrappers) once the model would leave no room for its gradients.
One tensor bigger than that room (a 41 GB ``nn.Embedding``) would fail in the allocator, or be
killed touching its pages, before any reading after it: so a factory call (``torch.empty``,
``zeros``, ``randn``..., ``Tensor.new_*``) is first asked on the meta device, which gives the size
it will allocate without allocating it, and the build stops before the real call is made.
A model that fits costs nothing extra and is the model the trace then uses; one that does
not is abandoned early and measured on the meta device (``core/meta.estimate``).
"""
from __future__ import annotations

import logging
import os

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gradviz.core.runtime.interrupts import Stopped
from gradviz.core.runtime.random_state import seeded
from gradviz.core.script.meta import HEADROOM, NEEDED_PER_PARAM_BYTE, available_bytes
from gradviz.core.script.load import ModelScript

log = logging.getLogger(__name__)

CHECK_BYTES = 1 << 20        # tensors smaller than this are not worth a look at the RSS
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class TooBig(Stopped):
    """The model being built would not leave room for its gradients in this machine's memory."""

    reason = "would not fit in memory"


def resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


# torch's functions that allocate a new tensor of a size given in their arguments: the size of what one
# of them asks for is known before it runs, by asking the same call on the meta device (no storage)
_FACTORIES = frozenset(getattr(torch, name) for name in (
    "empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "empty_strided", "eye", "arange",
    "linspace", "logspace", "normal", "tensor") if hasattr(torch, name))
_NEW = frozenset(getattr(torch.Tensor, name) for name in ("new_empty", "new_zeros", "new_ones", "new_full"))


def requested_bytes(func, args: tuple, kwargs: dict) -> int | None:
    """The bytes a factory call (``torch.empty(10**10, 1024)``) will allocate on the CPU, before it runs;
    None for any other call, another device, or a call that cannot be asked on the meta device."""
    if func in _NEW:
        base = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if base is None or (kwargs.get("device") or base.device).__str__() != "cpu" or "out" in kwargs:
            return None
        args = (torch.empty((), dtype=kwargs.get("dtype") or base.dtype, device="meta"), *args[1:])
    elif func not in _FACTORIES or "out" in kwargs or func is torch.tensor:
        return None
    elif torch.device(kwargs.get("device") or _default_device()).type != "cpu":
        return None
    try:
        meta = func(*args, **{**kwargs, "device": "meta", **({"pin_memory": False} if "pin_memory" in kwargs else {})})
    except Exception:  # noqa: BLE001 - a call meta cannot answer: the real call says what is wrong
        log.debug("cannot size %s on the meta device", getattr(func, "__name__", func), exc_info=True)
        return None
    return meta.numel() * meta.element_size() if isinstance(meta, torch.Tensor) else None


def _default_device() -> torch.device:
    getter = getattr(torch, "get_default_device", None)     # torch >= 2.3
    return getter() if getter is not None else torch.device("cpu")


class _Guard(TorchFunctionMode):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        asked = requested_bytes(func, args, kwargs) if func in _FACTORIES or func in _NEW else None
        if asked is not None and asked >= CHECK_BYTES:
            rss = resident_bytes()
            if rss is not None and rss + asked > self.limit:     # stopped before the allocator is asked
                raise TooBig(detail=f"one tensor of {asked / 2**30:.1f} GiB asked for")
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) and not out.is_meta and out.device.type == "cpu" \
                and out.numel() * out.element_size() >= CHECK_BYTES:
            rss = resident_bytes()
            if rss is not None and rss > self.limit:
                raise TooBig(detail=f"{rss / 2**30:.1f} GiB resident")
        return out


def build_within_memory(script: ModelScript, seed: int | None = 0) -> nn.Module:
    """``script.new_model()`` after ``torch.manual_seed(seed)`` (as a trace builds it), raising
    ``TooBig`` as soon as the build has used the share of the available memory that leaves
    room for the gradients (1 / ``NEEDED_PER_PARAM_BYTE`` of ``HEADROOM`` of it)."""
    with seeded(seed):
        available, rss = available_bytes(), resident_bytes()
        if available is None or rss is None:   # cannot tell: build as usual
            return script.new_model()
        limit = rss + int(HEADROOM * available / NEEDED_PER_PARAM_BYTE)
        with _Guard(limit):
            return script.new_model()
