"""Build a script's model for real, but stop before it outgrows this machine's memory.

To offer a structure-only trace when a model would not fit, gradviz could first build it on
the meta device to count its parameters; but a meta build of even a small model pulls in
PyTorch's Python reference kernels (``torch._refs``, and ``torch._dynamo`` behind them:
a second of CPU before any real work). Instead the real build runs under a
``TorchFunctionMode`` that reads the process's resident memory after every call producing
a tensor of 1 MB or more, and raises ``TooBig`` (a ``Stopped``: gradviz's own stop, which
passes through the script wrappers) once the model would leave no room for its gradients.
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


class _Guard(TorchFunctionMode):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
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
    if seed is not None:
        torch.manual_seed(seed)
    available, rss = available_bytes(), resident_bytes()
    if available is None or rss is None:   # cannot tell: build as usual
        return script.new_model()
    limit = rss + int(HEADROOM * available / NEEDED_PER_PARAM_BYTE)
    with _Guard(limit):
        return script.new_model()
