"""The tensors of a ``.pt2`` archive, rebuilt from raw bytes or from scanned pickles, and their tables checked.

A pt2 archive (torch >= 2.7) stores each weight and constant as the raw bytes of its storage
(``data/weights/weight_N``) and describes it in a JSON config (dtype code, sizes, strides, offset,
``is_param``, ``requires_grad``); ``raw_tensors`` rebuilds them with ``torch.frombuffer`` and
``torch.as_strided`` (which checks the bounds: a lying config cannot read past its member). Members
several entries share become aliased tensors, as torch makes them. A member marked ``use_pickle`` goes
through ``pickle_scan``; ``opaque_obj_*`` / ``custom_obj_*`` constants (plain and TorchScript pickles) are
refused. ``tensor_table`` / ``example_inputs`` check what a pickled member held.
"""
from __future__ import annotations

import math
import re
import zipfile
from typing import Any, Callable

import torch

from gradviz.core.script.file_errors import FileRefused, UnsafeFile
from gradviz.core.script.program_json import is_attribute_path

__all__ = ["raw_tensors", "tensor_table", "example_inputs"]


def _dtype(code: int, member: str) -> torch.dtype:
    from torch._export.serde import serialize as s
    from torch._export.serde.schema import ScalarType
    try:
        return s._SERIALIZE_TO_TORCH_DTYPE[ScalarType(code)]
    except (KeyError, ValueError):
        raise FileRefused(f"{member}: unknown dtype code {code!r}", member) from None


def _ints(values: Any, member: str, what: str) -> list[int]:
    out = []
    for v in values if isinstance(values, list) else [values]:
        if not (isinstance(v, dict) and set(v) == {"as_int"} and type(v["as_int"]) is int
                and 0 <= v["as_int"] < 2 ** 62):
            raise FileRefused(f"{member}: a stored tensor with a symbolic or broken {what} ({v!r:.60})", member)
        out.append(v["as_int"])
    return out


def raw_tensors(z: zipfile.ZipFile, root: str, config_name: str, folder: str, kind: str,
                read: Callable[[zipfile.ZipFile, str], bytes], read_json: Callable[[zipfile.ZipFile, str], Any],
                unpickle: Callable[[bytes, str], Any]) -> dict[str, Any]:
    """Tensors of a payload config (data/weights or data/constants), from their raw bytes."""
    cfg_member = root + config_name
    cfg = read_json(z, cfg_member)
    entries = cfg.get("config") if isinstance(cfg, dict) else None
    if not isinstance(entries, dict):
        raise FileRefused(f"{cfg_member}: no 'config' table", cfg_member)
    bases: dict[str, torch.Tensor] = {}
    out: dict[str, Any] = {}
    for fqn, meta in entries.items():
        if not is_attribute_path(fqn):
            raise UnsafeFile(f"{cfg_member}: the {kind} name {fqn!r:.80} holds a quote, backslash or "
                                "control character: refused", cfg_member)
        if not isinstance(meta, dict) or not isinstance(meta.get("path_name"), str) \
                or not re.fullmatch(r"[A-Za-z0-9_]+", meta["path_name"]):
            raise FileRefused(f"{cfg_member}: {fqn}: broken entry", cfg_member)
        member = root + folder + meta["path_name"]
        if meta["path_name"].startswith(("opaque_obj_", "custom_obj_")):
            raise UnsafeFile(f"{member}: the {kind} {fqn!r} is a pickled Python/TorchScript object "
                                f"({meta['path_name'].rsplit('_', 1)[0]}): refused, gradviz never unpickles it",
                                member)
        if meta.get("use_pickle"):
            value = unpickle(read(z, member), member)
            if not isinstance(value, torch.Tensor):
                raise UnsafeFile(f"{member}: the {kind} {fqn!r} is a pickled {type(value).__name__}, "
                                    "not a tensor: refused", member)
            if meta.get("is_param") and not isinstance(value, torch.nn.Parameter):
                value = torch.nn.Parameter(value, requires_grad=value.requires_grad or value.is_floating_point())
            out[fqn] = value
            continue
        tm = meta.get("tensor_meta")
        if not isinstance(tm, dict):
            raise FileRefused(f"{cfg_member}: {fqn}: no tensor_meta", cfg_member)
        dtype = _dtype(tm.get("dtype"), cfg_member)
        sizes = _ints(tm.get("sizes", []), cfg_member, "size")
        strides = _ints(tm.get("strides", []), cfg_member, "stride")
        offset = _ints(tm.get("storage_offset", {"as_int": 0}), cfg_member, "storage offset")[0]
        if meta["path_name"] not in bases:
            data = read(z, member)
            size = torch.empty((), dtype=dtype).element_size()
            if len(data) % size:
                raise FileRefused(f"{member}: {len(data)} bytes, not a whole number of {dtype}", member)
            bases[meta["path_name"]] = torch.frombuffer(bytearray(data), dtype=dtype) if data else None
        base = bases[meta["path_name"]]
        if base is None:        # torch writes an empty record for a tensor with no elements
            if math.prod(sizes) != 0:
                raise FileRefused(f"{member}: {fqn}: {math.prod(sizes):,} elements stored in 0 bytes", member)
            t = torch.zeros(sizes, dtype=dtype)
        else:
            try:
                t = torch.as_strided(base, sizes, strides, offset)
            except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
                raise FileRefused(f"{member}: {fqn}: its shape does not fit its bytes ({exc})", member) from None
        if meta.get("is_param"):
            t = torch.nn.Parameter(t, requires_grad=bool(tm.get("requires_grad")))
        elif tm.get("requires_grad"):
            t.requires_grad_(True)
        out[fqn] = t
    return out


def tensor_table(value: Any, member: str, kind: str) -> dict[str, torch.Tensor]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and is_attribute_path(k) for k in value):
        raise UnsafeFile(f"{member}: the {kind} are not a table of named tensors: refused", member)
    for k, v in value.items():
        if not isinstance(v, torch.Tensor):
            raise UnsafeFile(f"{member}: the {kind} entry {k!r} is a {type(v).__name__}: refused", member)
    return dict(value)


def example_inputs(value: Any, member: str) -> Any:
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and isinstance(value[1], dict)):
        raise UnsafeFile(f"{member}: the sample inputs are not (args, kwargs): refused", member)
    return value
