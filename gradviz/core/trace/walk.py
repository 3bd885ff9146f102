"""Iterative walk of an autograd graph and the static facts of each node.

Nothing here runs backward: it reads ``next_functions``, input metadata and saved
tensors (which must be read before backward frees them).
"""
from __future__ import annotations

import logging
import re
from typing import Any, Sequence

import torch

log = logging.getLogger(__name__)


def walk(roots: Sequence[Any]) -> tuple[list[Any], list[tuple[Any, Any, int]]]:
    """All nodes reachable from ``roots`` and the edges between them.

    Returns ``(nodes, edges)``: nodes in deterministic depth-first discovery order
    (the order of ``next_functions``), edges as ``(producer, consumer, output_nr)``
    in data-flow direction. Explicit stack: deep graphs never hit the recursion limit.
    """
    seen: dict[Any, None] = {}
    edges: list[tuple[Any, Any, int]] = []
    stack = list(reversed([r for r in roots if r is not None]))
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen[fn] = None
        nexts = fn.next_functions
        for nxt, output_nr in nexts:
            if nxt is not None:
                edges.append((nxt, fn, output_nr))
        # reversed so the first input is visited first (stable, readable order)
        for nxt, _ in reversed(nexts):
            if nxt is not None and nxt not in seen:
                stack.append(nxt)
    return list(seen), edges


_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


_LEAF_CLASSES: dict[type, bool] = {}


def is_leaf(fn: Any) -> bool:
    """An ``AccumulateGrad`` node (its class has ``.variable``, the leaf tensor), decided once per node
    class (a custom Function's ``ctx.variable = ...`` does not make its node a leaf)."""
    cls = type(fn)
    leaf = _LEAF_CLASSES.get(cls)
    if leaf is None:
        leaf = _LEAF_CLASSES[cls] = hasattr(cls, "variable")
    return leaf


def custom_function(fn: Any) -> str | None:
    """Qualified name of the ``autograd.Function`` behind a node, for user-defined ones."""
    cls = getattr(fn, "_forward_cls", None)
    if cls is None:
        return None
    return f"{cls.__module__}.{cls.__qualname__}"


_LABELS: dict[tuple[type, str], str] = {}


def readable_label(fn: Any) -> str:
    """``AddmmBackward0`` -> ``addmm``; custom Functions keep their class name."""
    name = fn.name()
    key = (type(fn), name)        # the label depends on the node's class and name only: worked out once
    label = _LABELS.get(key)
    if label is None:
        label = _LABELS[key] = _label(fn, name)
    return label


def _label(fn: Any, name: str) -> str:
    if is_leaf(fn):
        return "accumulate_grad"
    cls = getattr(fn, "_forward_cls", None)
    if cls is not None:
        return cls.__name__
    name = name.split("::")[-1]
    core = _BACKWARD_SUFFIX.sub("", name) or name
    return _CAMEL.sub("_", core).lower()


def output_metadata(fn: Any) -> list[dict]:
    """Shape/dtype/device of each tensor the node produced (the grads it receives)."""
    if is_leaf(fn):
        v = fn.variable
        return [{"shape": list(v.shape), "dtype": _dtype(v.dtype), "device": _device(v.device)}]
    out = []
    for meta in getattr(fn, "_input_metadata", ()):
        try:
            shape = list(meta.shape)
        except Exception:  # nested / symbolic shapes
            shape = []
        out.append({"shape": [int(s) for s in shape], "dtype": _dtype(meta.dtype), "device": _device(meta.device)})
    return out


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}
_CUSTOM_SAVED: dict[type, bool] = {}


def _saved_names(fn: Any) -> tuple[str, ...]:
    """The ``_saved_*`` attribute names of a node's class, looked up once per class
    (``dir()`` on every node of a 100k-node graph cost more than the walk itself)."""
    cls = type(fn)
    names = _SAVED_NAMES.get(cls)
    if names is None:
        names = _SAVED_NAMES[cls] = tuple(a for a in dir(fn) if a.startswith("_saved_"))
    return names


def _has_saved_tensors(fn: Any) -> bool:
    """Whether a node's class is a custom ``autograd.Function``'s (``ctx.save_for_backward``), once per class."""
    cls = type(fn)
    has = _CUSTOM_SAVED.get(cls)
    if has is None:
        has = _CUSTOM_SAVED[cls] = hasattr(cls, "saved_tensors")
    return has


def storage_key(t: torch.Tensor, storage: Any = None) -> int:
    """An identity of the memory a tensor lives in: two views of one storage share it.

    The data pointer of its storage; meta tensors have none (all 0), so there the
    storage object's own address (``_cdata``), stable while the graph holds the tensor.
    ``storage``: ``t.untyped_storage()`` when the caller has it already.
    """
    if storage is None:
        storage = t.untyped_storage()
    if t.is_meta:
        return int(getattr(storage, "_cdata", 0)) or id(t)
    return storage.data_ptr()


def _tensor_entry(name: str, t: torch.Tensor, storages: list | None) -> dict:
    if storages is not None:
        try:
            storage = t.untyped_storage()
            storages.append((storage_key(t, storage), storage.nbytes(), t.numel() * t.element_size()))
        except Exception:  # noqa: BLE001 - tensors without storage (sparse, nested, functional wrappers)
            log.debug("no storage for saved tensor %s", name, exc_info=True)
            storages.append((None, 0, t.numel() * t.element_size()))
    return {"name": name, "shape": list(t.shape), "dtype": _dtype(t.dtype)}


def saved_tensors(fn: Any, storages: list | None = None) -> list[dict]:
    """What the node saved for backward: tensors as name/shape/dtype, others as a short value.

    ``storages``, when given, receives ``(storage key, storage bytes, tensor bytes)`` per
    saved tensor: the memory it keeps alive until backward (``core/trace/memory.py`` adds it up).
    """
    saved = []
    for attr in _saved_names(fn):
        try:
            value = getattr(fn, attr)
        except Exception:  # freed after backward, or not readable
            continue
        name = attr[len("_saved_"):]
        if isinstance(value, torch.Tensor):
            saved.append(_tensor_entry(name, value, storages))
        elif isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
            for i, v in enumerate(value):
                saved.append(_tensor_entry(f"{name}[{i}]", v, storages))
        elif type(value) is tuple and len(value) <= 8 and all(type(v) is int for v in value):
            saved.append({"name": name, "value": list(value)})     # sizes and strides: what _plain makes of them
        elif value is None or isinstance(value, (bool, int, float, str)) or _small_sequence(value):
            saved.append({"name": name, "value": _plain(value)})
        else:
            saved.append({"name": name, "value": repr(value)[:60]})
    if _has_saved_tensors(fn):  # custom autograd.Function: ctx.save_for_backward
        try:
            tensors = fn.saved_tensors
        except RuntimeError:  # already freed by a backward
            log.debug("saved tensors of %s already freed", fn.name(), exc_info=True)
            tensors = ()
        for i, v in enumerate(tensors):
            if isinstance(v, torch.Tensor):
                saved.append(_tensor_entry(f"saved_tensors[{i}]", v, storages))
    return saved


def _small_sequence(value: Any) -> bool:
    return isinstance(value, (tuple, list, torch.Size)) and len(value) <= 8 and all(
        isinstance(v, (bool, int, float, type(None))) or hasattr(v, "__index__") for v in value)


def _plain(value: Any) -> Any:
    if isinstance(value, (tuple, list, torch.Size)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    try:
        return int(value)
    except Exception:
        return repr(value)


_DTYPES: dict[torch.dtype, str] = {}
_DEVICES: dict[torch.device, str] = {}


def _dtype(dtype: torch.dtype) -> str:
    text = _DTYPES.get(dtype)
    if text is None:
        text = _DTYPES[dtype] = str(dtype).replace("torch.", "")
    return text


def _device(device: torch.device) -> str:
    text = _DEVICES.get(device)
    if text is None:
        text = _DEVICES[device] = str(device)
    return text


def node_ids_for(nodes: Sequence[Any], param_names: dict[int, str], input_names: dict[int, int]) -> list[str]:
    """The deterministic id of each autograd node, ``nodes`` being ``walk()``'s list.

    ``param:<name>`` (``param_names``: id(parameter) -> qualified name),
    ``input:<i>`` (``input_names``: id(input tensor) -> index), ``leaf:<k>`` for
    other leaf tensors, ``op:<k>`` (k = place in the walk) for everything else.
    Tracing, live sampling and recording all use this one numbering.
    """
    ids: list[str] = []
    leaf_count = 0
    for k, fn in enumerate(nodes):
        if is_leaf(fn):
            var = fn.variable
            if id(var) in param_names:
                ids.append(f"param:{param_names[id(var)]}")
            elif id(var) in input_names:
                ids.append(f"input:{input_names[id(var)]}")
            else:
                ids.append(f"leaf:{leaf_count}")
                leaf_count += 1
        else:
            ids.append(f"op:{k}")
    return ids


def root_ids(n_roots: int) -> list[str]:
    """``['loss']`` for one root, ``['loss0', 'loss1', ...]`` for several."""
    return ["loss"] if n_roots == 1 else [f"loss{i}" for i in range(n_roots)]
