"""The run file is untrusted input: the reader checks the types of what it takes from it.

A run file edited by hand, written by a buggy tool or damaged on disk may hold a rank as a
string, a list where a number goes, text in a REAL column. Everything read past this point
(``analysis``, ``compare``, ``runs show``, the app) may rely on the types below; anything
else is a ``RecordError`` "corrupted run file" (``gradviz runs`` exits 2), never an
exception from deep inside a summary.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from gradviz.core.record.schema import RecordError

__all__ = ["check_meta", "real_cell", "int_cell", "corrupted"]

# the latest unix time Python's time and datetime can show (the year 9999)
_LAST_TIME = 253402300799.0


def corrupted(path: Path | None, what: str) -> RecordError:
    return RecordError(f"corrupted run file: {what}", path)


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _is_str(v: Any) -> bool:
    return type(v) is str


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: type(v) is list and all(check(x) for x in v)


def _shape(v: Any) -> bool:
    return type(v) is list and all(_is_int(x) and x >= 0 for x in v)


def _count(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _time(v: Any) -> bool:
    return _is_num(v) and 0 <= v <= _LAST_TIME


def _layout(v: Any) -> bool:
    """A sharded parameter's layout (``stats.sharding.layout``) as ``runs show`` prints it."""
    if v is None:
        return True
    return (type(v) is dict and all(_shape(v.get(k)) for k in ("global_shape", "local_shape", "mesh"))
            and _list_of(_is_str)(v.get("placements")) and _opt(_list_of(_is_str))(v.get("mesh_dims")))


def _change(v: Any) -> bool:
    return (type(v) is dict and _is_int(v.get("step"))
            and all(_list_of(_is_str)(v.get(k, [])) for k in ("added", "removed", "replaced")))


def _loop_finding(v: Any) -> bool:
    """A stored loop finding (``gradviz.core.loop``): text fields, lists of names, a dict of numbers."""
    from gradviz.core.diagnosis.findings import SEVERITIES

    return (type(v) is dict and all(_is_str(v.get(k)) for k in ("code", "message")) and v.get("severity") in SEVERITIES
            and all(_list_of(_is_str)(v.get(k, [])) for k in ("params", "modules", "nodes"))
            and _opt(_is_str)(v.get("location")) and type(v.get("data", {})) is dict)


def _loop_model(v: Any) -> bool:
    return type(v) is dict and _is_str(v.get("optimizer")) and _is_str(v.get("model"))


# key -> (what it must be, in words; the check). Keys not listed are kept as they are.
META_TYPES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "format": ("an integer", _is_int),
    "rank": ("an integer >= 0", _count),
    "world_size": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "node": ("an integer >= 0", _count),
    "nodes": ("an integer >= 1", lambda v: _is_int(v) and v >= 1),
    "local_rank": ("an integer or null", _opt(_count)),
    "pid": ("an integer or null", _opt(_is_int)),
    "every": ("an integer or null", _opt(_count)),
    "steps": ("an integer", _count),
    "created": ("a unix time", _opt(_time)),
    "param_names": ("a list of names", _list_of(_is_str)),
    "param_shapes": ("a list of shapes", _list_of(_shape)),
    "param_numel": ("a list of counts", _list_of(_count)),
    "param_shards": ("a list of shard layouts or null", _opt(_list_of(_layout))),
    "model_changes": ("a list of changes", _list_of(_change)),
    "loop_findings": ("a list of loop findings", _list_of(_loop_finding)),
    "loop_models": ("a list of optimizers and models", _list_of(_loop_model)),
    **{k: ("text or null", _opt(_is_str)) for k in ("status", "model_class", "hostname", "gradviz_version",
                                                    "torch_version", "wrapper", "optimizer", "device", "norms")},
    "argv": ("a list of text", _list_of(_is_str)),
    "grad_norms": ("before_clip, after_clip or mixed", _opt(lambda v: v in ("before_clip", "after_clip", "mixed"))),
    "max_grad_norm": ("a number or null", _opt(_is_num)),
    "storage_ties": ("a list of name groups", _list_of(_list_of(_is_str))),
}


def check_meta(meta: dict[str, Any], path: Path | None) -> None:
    """Raise "corrupted run file" for a meta value of the wrong type (or lists that disagree)."""
    for key, (what, ok) in META_TYPES.items():
        if key in meta and not ok(meta[key]):
            raise corrupted(path, f"meta {key!r} is {_show(meta[key])}, not {what}")
    names = meta.get("param_names") or []
    if len(set(names)) != len(names):
        raise corrupted(path, "meta 'param_names' names a parameter twice")
    for key in ("param_shapes", "param_numel", "param_shards"):
        value = meta.get(key)
        if value is not None and len(value) != len(names):
            raise corrupted(path, f"meta {key!r} has {len(value)} entries for {len(names)} parameters")
    rank, world = meta.get("rank", 0), meta.get("world_size", 1)
    if rank >= world:
        raise corrupted(path, f"rank {rank} of a world of {world}")


def _show(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def real_cell(value: Any, column: str, path: Path | None) -> float:
    """A REAL column's cell: NULL -> NaN (not recorded), the text 'NaN' -> NaN, a number -> float."""
    if value is None:
        return math.nan
    if type(value) in (float, int):
        return float(value)
    if value == "NaN":
        return math.nan
    raise corrupted(path, f"column {column!r} holds {_show(value)}, not a number")


def int_cell(value: Any, column: str, path: Path | None) -> int:
    if type(value) is int:
        return value
    raise corrupted(path, f"column {column!r} holds {_show(value)}, not an integer")
