"""Distributed / wrapped models: the user's module inside wrappers, and (rank, world size)."""
from __future__ import annotations

from torch import nn

__all__ = ["unwrap_model", "dist_info"]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DistributedDataParallel / DataParallel / torch.compile wrappers."""
    seen = set()
    while id(model) not in seen:
        seen.add(id(model))
        inner = getattr(model, "module", None)
        if isinstance(inner, nn.Module) and type(model).__name__ in ("DistributedDataParallel", "DataParallel",
                                                                       "FullyShardedDataParallel"):
            model = inner
            continue
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
    return model


def dist_info() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return 0, 1
