"""How ``StepStats`` reduces gradients, weights and updates to norms: one strategy object.

A strategy owns its parameters' buffers (views, the weight snapshot) and answers three calls:

* ``measure(max_norm, updates) -> (StepNumbers, total or None)``: after backward, every
  gradient norm; when ``updates``, every weight norm and a snapshot of the weights;
  clipping like ``clip_grad_norm_`` when ``max_norm`` is given (``total``: the pre-clip norm);
* ``measure_update(numbers)``: after ``optimizer.step()``, the norm of each update;
* ``restore()``: put the snapshot back (a NaN step's update undone).

Strategies (``STRATEGIES``): ``host`` (numpy BLAS on views of CPU float tensors,
``gradviz.core.stats.norms_host``), ``native`` (the host strategy whose common step -- gradient
norms only -- is one C++ call), ``device`` (``torch._foreach_norm``, one host copy when read,
``gradviz.core.stats.norms_device``), ``sharded`` (DTensor parameters -- FSDP2, tensor parallelism: the
norms of whole tensors from every rank's shard, one all-reduce a step, ``gradviz.core.stats.norms_sharded``).
"""
from __future__ import annotations

from typing import Sequence

import torch

from gradviz.core.stats.sharding import any_dtensor
from gradviz.core.stats.step_numbers import NormStrategy

__all__ = ["make_strategy", "STRATEGIES", "HOST_MAX_NUMEL"]

STRATEGIES = ("host", "native", "device", "sharded")
HOST_MAX_NUMEL = 50_000_000     # the host strategy up to this many parameter elements (2 extra copies)
_HOST_DTYPES = (torch.float32, torch.float64)


def _host_fits(params: Sequence[torch.Tensor]) -> bool:
    return (bool(params) and all(p.device.type == "cpu" and p.dtype in _HOST_DTYPES and p.layout == torch.strided
                                 and p.numel() > 0 and type(p) in (torch.Tensor, torch.nn.Parameter)
                                 for p in params)
            and sum(p.numel() for p in params) <= HOST_MAX_NUMEL)


def make_strategy(params: list[torch.Tensor], kind: str | None = None) -> NormStrategy:
    """The strategy for ``params``: ``kind`` if given (one of ``STRATEGIES``), else the
    fastest that fits: sharded for DTensor parameters, native/host for CPU float tensors (native when the
    accelerator is built and loaded), device otherwise."""
    if kind is not None and kind not in STRATEGIES:
        raise ValueError(f"unknown norm strategy {kind!r} (one of {', '.join(STRATEGIES)})")
    if kind == "sharded" or (kind is None and any_dtensor(params)):
        from gradviz.core.stats.norms_sharded import ShardedNorms
        return ShardedNorms(params)
    if kind == "device" or (kind is None and not _host_fits(params)):
        from gradviz.core.stats.norms_device import DeviceNorms
        return DeviceNorms(params)
    from gradviz.core.stats.norms_host import HostNorms, NativeNorms
    if kind in (None, "native"):
        from gradviz.core import native

        module = native.get()
        if module is not None:
            return NativeNorms(params, module)
        if kind == "native":
            raise ValueError("the native accelerator is not built or not loaded (gradviz native build)")
    return HostNorms(params)
