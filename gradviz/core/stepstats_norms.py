"""How ``StepStats`` reduces gradients, weights and updates to norms: one strategy object.

A strategy owns its parameters' buffers (views, the weight snapshot) and answers three calls:

* ``measure(max_norm, updates) -> (StepNumbers, total or None)``: after backward, every
  gradient norm; when ``updates``, every weight norm and a snapshot of the weights;
  clipping like ``clip_grad_norm_`` when ``max_norm`` is given (``total``: the pre-clip norm);
* ``measure_update(numbers)``: after ``optimizer.step()``, the norm of each update;
* ``restore()``: put the snapshot back (a NaN step's update undone).

Strategies (``STRATEGIES``): ``host`` (numpy BLAS on views of CPU float tensors,
``gradviz.core.stepstats_cpu``), ``native`` (the host strategy whose common step -- gradient
norms only -- is one C++ call), ``device`` (``torch._foreach_norm``, one host copy when read,
``gradviz.core.stepstats_device``), ``sharded`` (DTensor parameters -- FSDP2, tensor parallelism: the
norms of whole tensors from every rank's shard, one all-reduce a step, ``gradviz.core.stepstats_sharded``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

from gradviz.core.sharding import any_dtensor

__all__ = ["StepNumbers", "settle_numbers", "NormStrategy", "make_strategy", "present_grads", "STRATEGIES", "HOST_MAX_NUMEL"]

STRATEGIES = ("host", "native", "device", "sharded")
HOST_MAX_NUMEL = 50_000_000     # the host strategy up to this many parameter elements (2 extra copies)
_HOST_DTYPES = (torch.float32, torch.float64)


@dataclass(slots=True)
class StepNumbers:
    """What one step measured, before any host work.

    ``values``: ``n_grads`` gradient norms (of the parameters in ``present``; None = all
    ``n``), then ``n`` weight norms when ``weights``, then ``n`` update norms when ``deltas``.
    Squared norms as host numbers (``squared``) or norms as 0-d tensors of one device and
    dtype. ``max_norm``: the clipping threshold applied, if any. ``clipped``: with adaptive
    clipping, the ``n_grads`` gradient norms after every clip (host floats or 0-d tensors); None
    otherwise (the norms after a global clip alone follow from ``max_norm``). ``settle``: a
    collective the numbers still wait for (the sharded strategy's all-reduce, overlapped with the
    next steps); ``settle_numbers`` runs it before anything reads them.
    """

    values: list
    squared: bool
    n: int
    n_grads: int
    present: tuple[int, ...] | None = None
    weights: bool = False
    deltas: bool = False
    max_norm: float | None = None
    clipped: list | None = None
    settle: Callable[[], None] | None = None


def settle_numbers(steps: Sequence[StepNumbers]) -> None:
    """Wait for the collectives the numbers of ``steps`` are still waiting for (in step order)."""
    for s in steps:
        if s.settle is not None:
            fill, s.settle = s.settle, None
            fill()


class NormStrategy(Protocol):
    name: str
    device: torch.device

    def measure(self, max_norm: float | None, updates: bool) -> tuple[StepNumbers, torch.Tensor | None]: ...

    def measure_update(self, numbers: StepNumbers) -> None: ...

    def restore(self) -> bool: ...


def present_grads(params: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], tuple[int, ...] | None]:
    """The gradients that exist, and their indices (None when every parameter has one)."""
    grads = [p.grad for p in params]
    if all(g is not None for g in grads):
        return grads, None
    present = tuple(i for i, g in enumerate(grads) if g is not None)
    return [grads[i] for i in present], present


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
        from gradviz.core.stepstats_sharded import ShardedNorms
        return ShardedNorms(params)
    if kind == "device" or (kind is None and not _host_fits(params)):
        from gradviz.core.stepstats_device import DeviceNorms
        return DeviceNorms(params)
    from gradviz.core.stepstats_cpu import HostNorms, NativeNorms
    if kind in (None, "native"):
        from gradviz.core import native

        module = native.get()
        if module is not None:
            return NativeNorms(params, module)
        if kind == "native":
            raise ValueError("the native accelerator is not built or not loaded (gradviz native build)")
    return HostNorms(params)
