"""Sharded models -- FSDP2 (``fully_shard``) and DTensor tensor parallelism -- as gradviz reads them.

What torch does (checked on 2.13 and 2.14, CPU with gloo; ``tests/test_fsdp*.py``, ``tests/test_tp.py``):

* ``fully_shard(module)`` swaps the module's class for ``FSDP<Class>`` (no wrapper: ``named_parameters``
  gives the user's names) and turns each parameter into a ``DTensor`` sharded on dim 0 over the mesh
  (global shape on the tensor, the rank's rows in ``to_local()``; uneven splits leave a rank empty rows).
* During forward a sharded module holds *unsharded* parameters (plain ``nn.Parameter``s filled by an
  all-gather, freed after forward when it reshards). The autograd graph uses those:
  ``AccumulateGrad.variable`` is the unsharded parameter, not the DTensor. It is created at the first
  forward and stays the same object afterwards. ``unsharded_aliases`` names them.
* After backward ``p.grad`` is a ``DTensor`` (``Shard(0)``) of the reduce-scattered, averaged gradient.
* Tensor parallelism (``parallelize_module``): parameters are ``DTensor``s (``Shard``/``Replicate``),
  the graph holds them directly.

Only ``unsharded_aliases`` / ``fsdp_units`` read FSDP's private state (``_get_fsdp_state``, its
parameter groups and their ``FSDPParam``s): there is no public way to name the unsharded parameters.
When torch changes it they return nothing (logged), and the graph shows those parameters as
unnamed leaves instead of failing.

``torch.distributed.tensor`` is never imported here: a model with DTensors has imported it already,
and ``import gradviz`` stays cheap.
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Iterable

import torch
from torch import nn

from gradviz.core.runtime.errors import GradvizError

log = logging.getLogger(__name__)

__all__ = ["user_class", "type_name", "is_dtensor", "any_dtensor", "local", "placement_text", "layout", "fmt_layout",
           "unsharded_aliases", "param_names", "weight_tensors", "fsdp_units", "full_tensor", "whole", "whole_params",
           "ParamIndex", "ShardedModelError"]


class ShardedModelError(GradvizError):
    """A step that cannot run on a sharded model; ``advice`` says what to do instead."""

    def __init__(self, message: str, advice: str) -> None:
        super().__init__(message)
        self.advice = advice


def _dtensor_class() -> type | None:
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def is_dtensor(t: Any) -> bool:
    """True for a ``DTensor`` (a sharded or replicated tensor over a device mesh)."""
    if type(t) in (torch.Tensor, nn.Parameter) or t is None:
        return False
    cls = _dtensor_class()
    return cls is not None and isinstance(t, cls)


def any_dtensor(tensors: Iterable[Any]) -> bool:
    cls = _dtensor_class()
    return cls is not None and any(isinstance(t, cls) for t in tensors)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor (no autograd, no copy); any other tensor as it is."""
    if not is_dtensor(t):
        return t
    inner = getattr(t, "_local_tensor", None)          # what to_local() returns, without an autograd call
    if isinstance(inner, torch.Tensor):
        return inner
    with torch.no_grad():
        return t.to_local()


def placement_text(p: Any) -> str:
    """``Shard(0)``, ``Replicate()``, ``Partial(sum)``: a placement as a user reads it."""
    if getattr(p, "is_shard", None) and p.is_shard():
        return f"Shard({p.dim})"
    if getattr(p, "is_replicate", None) and p.is_replicate():
        return "Replicate()"
    if getattr(p, "is_partial", None) and p.is_partial():
        return f"Partial({getattr(p, 'reduce_op', 'sum')})"
    return str(p)


def layout(t: torch.Tensor) -> dict | None:
    """How a DTensor is laid out over its mesh (JSON-able), None for an ordinary tensor.

    ``global_shape``, ``local_shape`` (this rank's), ``mesh`` (its shape), ``mesh_dims`` (names or
    None), ``placements`` (one per mesh dimension), ``coordinate`` (this rank's place in the mesh).
    """
    if not is_dtensor(t):
        return None
    mesh = t.device_mesh
    coordinate = mesh.get_coordinate()
    return {"global_shape": list(t.shape), "local_shape": list(local(t).shape),
            "mesh": list(mesh.shape), "mesh_dims": list(mesh.mesh_dim_names) if mesh.mesh_dim_names else None,
            "placements": [placement_text(p) for p in t.placements],
            "coordinate": list(coordinate) if coordinate is not None else None}


def fmt_layout(lay: dict | None) -> str:
    """``16x8 Shard(0) on mesh 2: local 8x8`` (a ``layout``) for ``runs show`` and the inspector."""
    if not lay:
        return "not sharded"

    def dims(shape):
        return "x".join(map(str, shape)) or "scalar"
    names = f" ({', '.join(lay['mesh_dims'])})" if lay.get("mesh_dims") else ""
    return (f"{dims(lay['global_shape'])} {', '.join(lay['placements'])} on mesh {dims(lay['mesh'])}{names}: "
            f"local {dims(lay['local_shape'])}")


def user_class(module: nn.Module) -> type:
    """The class the user wrote: ``fully_shard`` swaps a module's class for ``FSDP<Class>``, a subclass
    of ``(FSDPModule, <Class>)``."""
    cls = type(module)
    bases = cls.__bases__
    if len(bases) == 2 and bases[0].__name__ == "FSDPModule" and cls.__name__ == f"FSDP{bases[1].__name__}":
        return bases[1]
    return cls


def type_name(module: nn.Module) -> str:
    """``Linear`` for a ``Linear`` sharded with ``fully_shard`` (its class reads ``FSDPLinear``)."""
    return user_class(module).__name__


# -- FSDP2's unsharded parameters -------------------------------------------------------------------

def _fsdp_params(model: nn.Module) -> list[tuple[nn.Module, Any, Any]]:
    """(FSDP module, its parameter group, FSDPParam) for every FSDP2-managed parameter below ``model``."""
    out = []
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        if get_state is None:
            continue
        try:
            state = get_state()
            groups = list(getattr(state, "_fsdp_param_groups", None) or ())
            if not groups and getattr(state, "_fsdp_param_group", None) is not None:
                groups = [state._fsdp_param_group]
            out.extend((module, group, fp) for group in groups for fp in group.fsdp_params)
        except (AttributeError, TypeError, RuntimeError):
            log.debug("FSDP state of %s not readable (a torch version gradviz does not know)",
                      type(module).__name__, exc_info=True)
    return out


def unsharded_aliases(model: nn.Module | None) -> dict[int, str]:
    """{id(unsharded parameter): the user's name} for FSDP2 modules below ``model``.

    The unsharded parameters exist from the first forward on (empty before). Tied parameters keep
    the name ``named_parameters`` gives them.
    """
    if model is None or not hasattr(torch, "distributed") or not torch.distributed.is_available():
        return {}
    entries = _fsdp_params(model)
    if not entries:
        return {}
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for _, _, fp in entries:
        name = names.get(id(getattr(fp, "sharded_param", None)))
        unsharded = getattr(fp, "_unsharded_param", None)        # made at the first all-gather
        if name is not None and isinstance(unsharded, torch.Tensor):
            out[id(unsharded)] = name
    return out


def param_names(model: nn.Module | None) -> dict[int, str]:
    """{id(tensor): parameter name} of what a graph's ``AccumulateGrad`` nodes may hold: the
    parameters, and FSDP2's unsharded parameters under the same names."""
    if model is None:
        return {}
    names = {id(p): n for n, p in model.named_parameters()}
    if any_dtensor(model.parameters()):
        names.update(unsharded_aliases(model))
    return names


def weight_tensors(model: nn.Module | None) -> list[torch.Tensor]:
    """Tensors holding the model's weights on this rank: parameters (their local shards) and
    FSDP2's unsharded parameters (what forward's ops saved)."""
    if model is None:
        return []
    params = list(model.parameters())
    if not any_dtensor(params):
        return params
    out = [local(p) for p in params]
    for _, _, fp in _fsdp_params(model):
        unsharded = getattr(fp, "_unsharded_param", None)
        if isinstance(unsharded, torch.Tensor):
            out.append(unsharded)
    return out


def fsdp_units(model: nn.Module | None) -> list[dict]:
    """The FSDP2 modules of ``model`` in module order: ``module`` (path), ``params`` (names),
    ``mesh`` (shape), ``reshard_after_forward`` (True: gathered again for backward)."""
    entries = _fsdp_params(model) if model is not None else []
    if not entries:
        return []
    paths = {id(m): p for p, m in model.named_modules()}
    names = {id(p): n for n, p in model.named_parameters()}
    units: dict[int, dict] = {}
    for module, group, fp in entries:
        unit = units.setdefault(id(module), {
            "module": paths.get(id(module), ""), "params": [], "mesh": [],
            "reshard_after_forward": getattr(group, "post_forward_mesh_info", None) is not None})
        name = names.get(id(getattr(fp, "sharded_param", None)))
        if name is not None:
            unit["params"].append(name)
            unit["mesh"] = list(fp.sharded_param.device_mesh.shape)
    order = {id(m): i for i, m in enumerate(model.modules())}
    return [units[k] for k in sorted(units, key=lambda k: order.get(k, 0))]


def full_tensor(t: torch.Tensor | None) -> torch.Tensor | None:
    """A DTensor gathered whole on every rank (a collective: every rank must call it, in the same
    order); any other tensor as it is."""
    if t is None or not is_dtensor(t):
        return t
    with torch.no_grad():
        return t.full_tensor()


def whole(tensors):
    """The tensors with each DTensor gathered whole (a collective per DTensor: every rank calls this
    at the same point -- a backward hook of a graph all ranks run -- in the same order); a sequence
    without DTensors comes back as it is."""
    if not any_dtensor(tensors):
        return tensors
    return [full_tensor(t) for t in tensors]


def whole_params(model: nn.Module, grads: dict[str, torch.Tensor | None]):
    """``(name, parameter, whole value, whole gradient)`` for each parameter, gathered one at a time.

    For an unsharded model the value is the parameter and the gradient ``grads[name]``. With
    DTensors each is gathered whole (``full_tensor``, a collective per tensor in parameter order)
    right before it is yielded, so at most one whole parameter is held at a time. Which gradients
    exist is agreed first (one collective): a gradient missing on any rank is None everywhere, so
    every rank gathers the same tensors and none waits forever.
    """
    named = list(model.named_parameters())
    if not any_dtensor(p for _, p in named):
        for name, p in named:
            yield name, p, p, grads.get(name)
        return
    present = _present_everywhere([grads.get(name) is not None for name, _ in named])
    for (name, p), has in zip(named, present):
        grad = grads.get(name) if has else None
        yield name, p, full_tensor(p), full_tensor(grad) if is_dtensor(grad) else grad


def fsdp_reduced(model: nn.Module, grads: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
    """Gradients of FSDP2-managed parameters taken with ``torch.autograd.grad`` (this rank's part, of
    the unsharded shape) averaged over the shard group, as FSDP's reduce-scatter would: the whole
    gradient, the same on every rank. One all-reduce per parameter, in parameter order; other
    gradients as they are. (FSDP's default average; a custom gradient divide factor is not read.)"""
    import torch.distributed as dist

    managed = {}
    for _, _, fp in _fsdp_params(model):
        managed[id(getattr(fp, "sharded_param", None))] = fp
    if not managed or not (dist.is_available() and dist.is_initialized()):
        return grads
    named = [(n, managed[id(p)]) for n, p in model.named_parameters() if id(p) in managed]
    present = _present_everywhere([grads.get(n) is not None for n, _ in named])
    out = dict(grads)
    for (name, fp), has in zip(named, present):
        if not has:
            out[name] = None
            continue
        mesh = fp.sharded_param.device_mesh
        group = mesh.get_group() if mesh.ndim == 1 else None       # None: the default group (HSDP: all ranks)
        total = grads[name].detach().clone()
        dist.all_reduce(total, group=group)
        out[name] = total / (mesh.size() if group is not None else dist.get_world_size())
    return out


def _present_everywhere(flags: list[bool]) -> list[bool]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or not flags:
        return flags
    t = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    agreed = [bool(v) for v in t.tolist()]
    if agreed != flags:
        log.warning("gradients of %d parameters exist on some ranks only: shown as missing",
                    sum(a != f for a, f in zip(agreed, flags)))
    return agreed


def world() -> dict:
    """``{"rank", "world_size"}`` of the default process group ({0, 1} without one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    return {"rank": 0, "world_size": 1}


def _collective_device() -> torch.device:
    """Where the default process group's collectives take tensors (NCCL: the current GPU)."""
    import torch.distributed as dist

    backend = str(dist.get_backend())
    if "nccl" in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class ParamIndex:
    """id(tensor) -> parameter name while a forward runs: the parameters, and FSDP2's unsharded
    parameters as they appear (they are made at a module's first all-gather, inside forward)."""

    def __init__(self, model: nn.Module | None) -> None:
        self.model = model
        self.names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        self.sharded = model is not None and any_dtensor(model.parameters())
        self._strangers: set[int] = set()          # parameters looked up once and not the model's

    def names_of(self, tensors: list[torch.Tensor]) -> list[str]:
        names = self.names
        found = [names[id(t)] for t in tensors if id(t) in names]
        if self.sharded and len(found) < len(tensors):
            fresh = [t for t in tensors if id(t) not in names and isinstance(t, nn.Parameter)
                     and id(t) not in self._strangers]
            if fresh:
                names.update(unsharded_aliases(self.model))
                self._strangers.update(id(t) for t in fresh if id(t) not in names)
                found = [names[id(t)] for t in tensors if id(t) in names]
        return found
