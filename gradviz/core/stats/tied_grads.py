"""Parameters tied by storage counted once in the step statistics (``split_ties``, ``fold_ties``).

Two Parameter objects over the same bytes (``load_state_dict(..., assign=True)`` of a state dict that
holds a tied tensor once, ``nn.Parameter(other)``, programs rebuilt by older torches) are one tensor:
autograd gives each object a ``.grad`` of its own, and the gradient of the shared bytes is their sum
(what SGD applies to them, one object after the other). ``StepStats`` tracks the first name of such
a group only; its gradient norm is the norm of the group's summed gradients (``fold_ties``), counted
once in the global norm; weight norms and updates are the first object's, which are the group's bytes.
One object reached under two names (a tie written in Python) is already one parameter.
"""
from __future__ import annotations

import functools
from typing import Sequence

import torch

from gradviz.core.runtime.ties import view_key
from gradviz.core.stats.step_numbers import StepNumbers

__all__ = ["split_ties", "fold_ties", "group_grad"]


def split_ties(pairs: Sequence[tuple[str, torch.Tensor]]) -> tuple[list[tuple[str, torch.Tensor]],
                                                                     dict[int, list[tuple[str, torch.Tensor]]]]:
    """(the pairs to track, one per tensor: its first name; {tracked index: the other objects of its
    bytes, with their names}). An object given twice is kept once, as ``named_parameters`` does."""
    kept: list[tuple[str, torch.Tensor]] = []
    where: dict[tuple, int] = {}
    seen: set[int] = set()
    tied: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for name, p in pairs:
        if id(p) in seen:
            continue
        seen.add(id(p))
        key = view_key(p)
        if key in where:
            tied.setdefault(where[key], []).append((name, p))
        else:
            where[key] = len(kept)
            kept.append((name, p))
    return kept, tied


def group_grad(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The gradient of one tensor held by several objects: the sum of their dense ``.grad`` (None: none)."""
    parts = [t.grad for t in tensors if t.grad is not None and t.grad.layout == torch.strided]
    if not parts:
        return None
    with torch.no_grad():
        return parts[0] if len(parts) == 1 else functools.reduce(torch.add, parts)


def fold_ties(numbers: StepNumbers, params: Sequence[torch.Tensor],
              tied: dict[int, list[tuple[str, torch.Tensor]]], device: torch.device) -> None:
    """Replace the measured gradient norm of each tied group's first object by its group's (in place);
    a group whose first object has no gradient but another does gets one."""
    n_grads = numbers.n_grads
    present = numbers.present if numbers.present is not None else tuple(range(numbers.n))
    head = dict(zip(present, numbers.values[:n_grads]))
    rest = numbers.values[n_grads:]
    like = numbers.values[0] if numbers.values and not numbers.squared else None
    for i, others in tied.items():
        g = group_grad([params[i], *(q for _, q in others)])
        if g is None:
            head.pop(i, None)
            continue
        norm = torch.linalg.vector_norm(g.detach())
        if numbers.squared:
            head[i] = float(norm) ** 2
        else:
            head[i] = norm.to(device=like.device if like is not None else device,
                              dtype=like.dtype if like is not None else torch.float32)
    order = sorted(head)
    numbers.values[:] = [head[i] for i in order] + rest
    numbers.n_grads = len(order)
    numbers.present = None if len(order) == numbers.n else tuple(order)
