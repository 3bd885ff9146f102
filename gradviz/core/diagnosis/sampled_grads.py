"""Analytic gradients kept only where a check reads them: one backward, bounded memory.

A numerical gradient check compares a few sampled elements per parameter. Holding every
parameter's full gradient for that (``torch.autograd.grad`` returns them all at once)
costs as much memory as the model itself, twice in float64. Here each parameter's
gradient is read as soon as backward has accumulated it (a post-accumulate-grad hook, a
public torch mechanism since 2.1), the sampled elements are copied out, and the full
gradient is dropped: the peak is the gradients in flight, not all of them.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch


def sampled_gradients(loss: torch.Tensor, params: Sequence[torch.Tensor],
                      pick: Callable[[int, torch.Tensor | None], list[int]]) -> list[dict[int, float]]:
    """Run ``loss.backward()`` once; for parameter ``k`` keep ``{index: gradient}`` at the flat
    indices ``pick(k, its full gradient)`` chooses (``pick(k, None)`` for a parameter no gradient
    reached: its values are 0). ``params`` must be leaves; their ``.grad`` is left None. A plain
    ``backward()`` (reentrant checkpointing refuses ``autograd.grad`` and ``inputs=``): other
    leaves that require grad accumulate as usual."""
    kept: list[dict[int, float] | None] = [None] * len(params)
    handles = []

    def hook_for(k: int):
        def hook(p: torch.Tensor) -> None:
            g = p.grad
            p.grad = None
            if g is None:
                return
            if g.layout != torch.strided:
                g = g.to_dense()
            idx = pick(k, g)
            values = g.detach().reshape(-1)[torch.tensor(idx, dtype=torch.long, device=g.device)]
            kept[k] = dict(zip(idx, values.double().cpu().tolist()))
        return hook

    for p in params:
        p.grad = None
    try:
        for k, p in enumerate(params):
            handles.append(p.register_post_accumulate_grad_hook(hook_for(k)))
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return [k_vals if k_vals is not None else {i: 0.0 for i in pick(k, None)} for k, k_vals in enumerate(kept)]
