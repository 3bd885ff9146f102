"""What a norm strategy measures in one step (``StepNumbers``) and the interface every strategy offers.

The shared piece below ``norm_strategies`` (which chooses a strategy) and the strategies themselves
(``norms_host``, ``norms_device``, ``norms_sharded``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import torch

__all__ = ["StepNumbers", "settle_numbers", "NormStrategy", "present_grads"]


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
