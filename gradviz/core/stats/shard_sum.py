"""Norms of whole DTensors from their shards: every rank squares its local part, one all-reduce sums them.

The squared L2 norm of a tensor is the sum of the squared norms of disjoint pieces of it. A DTensor
is cut into such pieces along its ``Shard`` mesh dimensions and copied along its ``Replicate`` ones,
so summing every rank's local squared norm would count each piece once per replica. ``ShardSum``
therefore lets a rank contribute only when it sits at coordinate 0 of every mesh dimension the
tensor is *not* sharded on (its ``mask``): the sum over all ranks of the mesh is then exact, and
after the all-reduce every rank holds the same number. ``Partial`` placements (pending sums) have no
local norm: ``settled`` redistributes them to ``Replicate`` first (one collective each; gradients
of parameters are not partial under FSDP2 or the stock tensor-parallel styles).

Many tensors go into one vector: one all-reduce over the default group when every mesh spans the
whole world (FSDP2, 1-D tensor parallelism, 2-D meshes over all ranks), else one per mesh dimension
of each mesh. Every rank must call ``reduce`` at the same point with vectors of the same length:
the callers (``StepStats``' sharded strategy, node norms) are on the same step of the same graph on
every rank.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from gradviz.core.stats.sharding import is_dtensor, local
from gradviz.core.stats.tensors import flat_view, norm_values

__all__ = ["ShardSum", "settled", "local_squares", "collective_device", "shard_totals", "whole_squares"]

_HOST_DTYPES = (torch.float32, torch.float64)


def settled(t: torch.Tensor) -> torch.Tensor:
    """A DTensor with no ``Partial`` placement (redistributed to ``Replicate``: a collective), or ``t``."""
    if not is_dtensor(t) or not any(p.is_partial() for p in t.placements):
        return t
    from torch.distributed.tensor import Replicate

    with torch.no_grad():
        return t.redistribute(t.device_mesh, [Replicate() if p.is_partial() else p for p in t.placements])


def collective_device(mesh: Any) -> torch.device:
    """Where a mesh's collectives take tensors (``cpu`` for gloo; the current GPU for NCCL)."""
    kind = getattr(mesh, "device_type", "cpu")
    if kind == "cpu":
        return torch.device("cpu")
    module = getattr(torch, kind, None)
    index = module.current_device() if module is not None and hasattr(module, "current_device") else 0
    return torch.device(kind, index)


def local_squares(tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """float64 squared norms of the tensors' local parts, on ``device``: numpy dot products on views
    of CPU float tensors (a fraction of torch's per-call cost), ``_foreach_norm`` elsewhere."""
    parts = [local(t) for t in tensors]
    if not parts:
        return torch.zeros(0, dtype=torch.float64, device=device)
    if all(p.is_cpu and p.dtype in _HOST_DTYPES and p.layout == torch.strided for p in parts):
        flats = [flat_view(p) for p in parts]
        return torch.from_numpy(np.array([float(np.dot(a, a)) for a in flats], dtype=np.float64)).to(device)
    with torch.no_grad():
        norms = torch._foreach_norm([norm_values(p) for p in parts])
        stacked = torch.stack([n.to(device=device, dtype=torch.float64) for n in norms])
    return stacked * stacked


class ShardSum:
    """Sums squared local norms of DTensors across their shards (see the module docstring).

    ``tensors`` fixes the slots: slot ``j`` is ``tensors[j]``'s mesh. ``mask(ts)`` gives each
    tensor's 0/1 contribution on this rank; ``reduce(vec)`` all-reduces a vector whose last axis
    has one entry per slot (any number of rows: gradients, weights, presence counts at once).
    """

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        import torch.distributed as dist

        self.world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        meshes: dict[int, Any] = {}
        slots: dict[int, list[int]] = {}
        for j, t in enumerate(tensors):
            mesh = t.device_mesh
            meshes.setdefault(id(mesh), mesh)
            slots.setdefault(id(mesh), []).append(j)
        self.n = len(tensors)
        everywhere = [k for k, m in meshes.items() if m.size() == self.world]
        # (slot positions or None = all, process groups one after another; None = the default group)
        self.plan: list[tuple[np.ndarray | None, list]] = []
        if everywhere:
            pos = sorted(j for k in everywhere for j in slots[k])
            self.plan.append((None if len(pos) == self.n else np.asarray(pos, dtype=np.intp), [None]))
        for k, mesh in meshes.items():
            if k not in everywhere:
                self.plan.append((np.asarray(slots[k], dtype=np.intp), [mesh.get_group(d) for d in range(mesh.ndim)]))
        first = next(iter(meshes.values()), None)
        self.device = collective_device(first) if first is not None else torch.device("cpu")
        self._masks: dict[tuple, float] = {}
        self.collectives = 0                  # all-reduces issued (tests count them)

    def mask(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """float64 0/1 per tensor: 1 where this rank holds a piece no other contributing rank holds."""
        out = []
        for t in tensors:
            key = (id(t.device_mesh), tuple(p.is_shard() for p in t.placements))
            m = self._masks.get(key)
            if m is None:
                coord = t.device_mesh.get_coordinate() or ()
                m = float(all(c == 0 for c, p in zip(coord, t.placements) if not p.is_shard()))
                self._masks[key] = m
            out.append(m)
        return torch.tensor(out, dtype=torch.float64, device=self.device)

    def reduce(self, vec: torch.Tensor) -> torch.Tensor:
        """Sum ``vec`` (rows x slots, or one row) over the ranks of each slot's mesh, in place."""
        import torch.distributed as dist

        if self.world <= 1 or not self.n:
            return vec
        for positions, groups in self.plan:
            part = vec if positions is None else vec[..., positions].contiguous()
            for group in groups:
                dist.all_reduce(part, group=group)
                self.collectives += 1
            if positions is not None:
                vec[..., positions] = part
        return vec


    def reduce_async(self, vec: torch.Tensor):
        """``reduce`` started, not waited for: the collective's ``Work`` (``wait()`` before reading
        ``vec``), or None when it ran at once (nothing to do, or several groups one after another)."""
        import torch.distributed as dist

        if self.world > 1 and self.n and len(self.plan) == 1 and self.plan[0][0] is None \
                and len(self.plan[0][1]) == 1:
            self.collectives += 1
            return dist.all_reduce(vec, group=self.plan[0][1][0], async_op=True)
        self.reduce(vec)
        return None


def shard_totals(metas: Sequence[Any], squares: torch.Tensor) -> torch.Tensor:
    """Whole squared norms from this rank's local squared norms of the DTensors ``metas`` describes
    (anything with ``device_mesh`` and ``placements``): masked, then all-reduced at once (float64)."""
    sums = ShardSum(metas)
    vec = squares.to(sums.device, torch.float64) * sums.mask(metas)
    return sums.reduce(vec)


def whole_squares(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """float64 squared norms of whole tensors: DTensors summed over their shards (one all-reduce for
    all of them; every rank calls this with the same list), other tensors this rank's own."""
    ts = [settled(t) for t in tensors]
    dt = [j for j, t in enumerate(ts) if is_dtensor(t)]
    sq = local_squares(ts, torch.device("cpu"))
    if dt:
        sq[dt] = shard_totals([ts[j] for j in dt], sq[dt]).cpu()
    return sq.numpy()
