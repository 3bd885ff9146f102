"""The ``device`` norm strategy of ``StepStats``: ``torch._foreach_*`` kernels, no host sync.

Every gradient and weight norm comes from one ``_foreach_norm`` call; the 0-d results stay
on the device until ``step_columns`` stacks the rows it converts and copies them once.
Works for any device, dtype and layout (sparse gradients: the norm of their values).
"""
from __future__ import annotations

import torch
from torch.nn.utils import clip_grads_with_norm_

from gradviz.core.stats.tensors import norm_values
from gradviz.core.stats.step_numbers import StepNumbers, present_grads

__all__ = ["DeviceNorms"]


class DeviceNorms:
    """``torch._foreach_norm`` over gradients and weights (see the module docstring)."""

    name = "device"

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.n = len(params)
        devices = {p.device for p in params}
        self.device = params[0].device if params else torch.device("cpu")
        # 0-d norms of several devices or dtypes are made stackable (float32 on one device)
        self._uniform = len(devices) <= 1 and len({p.dtype for p in params}) <= 1
        self._snapshot: list[torch.Tensor] | None = None

    def measure(self, max_norm: float | None, updates: bool) -> tuple[StepNumbers, torch.Tensor | None]:
        params = self.params
        grads, present = present_grads(params)
        with torch.no_grad():
            if any(g.layout != torch.strided for g in grads):      # sparse gradients: their values' norms
                grads = [norm_values(g) for g in grads]
            norms = self._same(list(torch._foreach_norm(grads + params))) if params else []
            numbers = StepNumbers(norms, False, self.n, len(grads), present, weights=bool(params))
            total = None
            if max_norm is not None and grads:
                total = torch.linalg.vector_norm(torch.stack(norms[:len(grads)]))
                clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, total, foreach=None)
                numbers.max_norm = float(max_norm)
            if updates and params:
                if self._snapshot is None:
                    self._snapshot = [p.detach().clone() for p in params]
                else:
                    torch._foreach_copy_(self._snapshot, params)
        return numbers, total

    def measure_update(self, numbers: StepNumbers) -> None:
        if self._snapshot is None or not numbers.weights:
            return
        with torch.no_grad():
            deltas = torch._foreach_sub(self._snapshot, self.params)   # the snapshot stays (restore)
            numbers.values.extend(self._same(list(torch._foreach_norm(deltas))))
        numbers.deltas = True

    def restore(self) -> bool:
        if self._snapshot is None:
            return False
        with torch.no_grad():
            torch._foreach_copy_(self.params, self._snapshot)
        return True

    def _same(self, norms: list[torch.Tensor]) -> list[torch.Tensor]:
        if self._uniform:
            return norms
        return [t.to(device=self.device, dtype=torch.float32) for t in norms]
