"""Distributed runs: the user's module inside wrappers, and where this process sits in the world.

``dist_info()`` is (rank, world size): from the default process group when it is
initialised, else from the environment ``torchrun`` (and ``torch.distributed.launch``)
set up (``RANK``, ``WORLD_SIZE``), else (0, 1). ``node_info()`` is (node rank, number of
nodes): ``torchrun`` sets ``GROUP_RANK`` / ``GROUP_WORLD_SIZE`` (one worker group per node),
SLURM ``SLURM_NODEID`` / ``SLURM_NNODES``; a run spawned on one host (``mp.spawn``) has (0, 1).
"""
from __future__ import annotations

import logging
import os

import torch
from torch import nn

log = logging.getLogger(__name__)

__all__ = ["unwrap_model", "dist_info", "node_info"]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside DistributedDataParallel / DataParallel / torch.compile wrappers.
    (FSDP2's ``fully_shard`` wraps nothing: the module itself is sharded in place.)"""
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


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def dist_info() -> tuple[int, int]:
    """(rank, world size): the process group's, else torchrun's environment, else (0, 1)."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (ImportError, RuntimeError):         # a torch without distributed, a group being torn down
        log.debug("no process group to ask for the rank", exc_info=True)
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world is not None and 0 <= rank < world:
        return rank, world
    return 0, 1


def node_info() -> tuple[int, int]:
    """(node rank, number of nodes) from torchrun's or SLURM's environment; (0, 1) otherwise."""
    nodes = _env_int("GROUP_WORLD_SIZE", "SLURM_NNODES")
    node = _env_int("GROUP_RANK", "SLURM_NODEID")
    if nodes is not None and node is not None and 0 <= node < nodes:
        return node, nodes
    return 0, 1


def largest_over_ranks(value: int) -> int:
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def local_rank() -> int | None:
    value = os.environ.get("LOCAL_RANK", "").strip()
    return int(value) if value.isdigit() else None
