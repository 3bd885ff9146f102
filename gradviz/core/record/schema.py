"""The run file: one SQLite database per run (and per rank), no pickle anywhere.

Layout (``SCHEMA_VERSION`` 1, stored as ``PRAGMA user_version``; ``PRAGMA
application_id`` = ``APPLICATION_ID`` marks the file as a gradviz run)::

    meta(key TEXT PRIMARY KEY, value TEXT)      -- value is JSON text
        format, gradviz_version, torch_version, created (unix time), model_class, param_names,
        param_shapes, param_numel, rank, world_size, hostname, pid, every, optimizer, argv
    steps(step INTEGER PRIMARY KEY, time REAL, loss REAL, grad_norm REAL, lr REAL,
          update_ratio REAL, grad_norms BLOB, update_ratios BLOB, node_sampled INTEGER)
    graphs(id INTEGER PRIMARY KEY, step INTEGER, hash TEXT, nodes TEXT, graph TEXT)
    node_norms(step INTEGER PRIMARY KEY, graph_id INTEGER, norms BLOB)

* ``time`` is wall-clock unix time when ``step`` was recorded.
* ``loss``, ``grad_norm``, ``lr``, ``update_ratio`` are REAL; NaN is stored as the
  text ``'NaN'`` (SQLite would turn a NaN REAL into NULL); NULL means "not recorded".
* ``grad_norms`` / ``update_ratios``: little-endian float32 arrays, one value per
  parameter in ``meta.param_names`` order; ``-1`` means "no gradient" (grad None)
  resp. "no update recorded".
* ``graphs.nodes``: JSON list of node ids (the ``gradviz.core.trace.tracer`` ids);
  ``graphs.graph``: the structure as JSON node-link data (no gradient values).
  A new row is written when the structure hash changes.
* ``node_norms.norms``: float32 array aligned with ``graphs.nodes`` of ``graph_id``;
  NaN where the node's gradient was NaN, ``-1`` where no gradient reached it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from gradviz.core.runtime.errors import GradvizError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x47565255          # 'GVRU'
EXTENSION = ".gvrun"
FILE_FILTER = "gradviz runs (*.gvrun *.sqlite *.db);;All files (*)"
NO_VALUE = -1.0                       # in float32 arrays: no gradient / not recorded

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    step INTEGER PRIMARY KEY, time REAL, loss REAL, grad_norm REAL, lr REAL, update_ratio REAL,
    grad_norms BLOB, update_ratios BLOB, node_sampled INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS graphs (
    id INTEGER PRIMARY KEY, step INTEGER NOT NULL, hash TEXT NOT NULL, nodes TEXT NOT NULL, graph TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS node_norms (step INTEGER PRIMARY KEY, graph_id INTEGER NOT NULL, norms BLOB NOT NULL);
"""
TABLES = {"meta", "steps", "graphs", "node_norms"}


class RecordError(GradvizError):
    """A run file cannot be written or read (bad path, full disk, corrupted or foreign file)."""

    def __init__(self, message: str, path: str | os.PathLike | None = None) -> None:
        self.path = str(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)
        self.message = message


def to_blob(values) -> bytes:
    """float32 little-endian bytes of a 1-D sequence / array."""
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def from_blob(blob: bytes | None, n: int | None = None) -> np.ndarray:
    """The float32 array of ``to_blob`` (as float64 for arithmetic); empty for NULL."""
    if blob is None:
        return np.full(n or 0, np.nan)
    if len(blob) % 4:
        raise RecordError("corrupted array (length not a multiple of 4)")
    arr = np.frombuffer(blob, dtype="<f4").astype(np.float64)
    if n is not None and arr.size != n:
        raise RecordError(f"array of {arr.size} values where {n} were expected")
    return arr


def real(value: float | None):
    """A float for a REAL column: NaN as the text 'NaN'."""
    if value is None:
        return None
    value = float(value)
    return "NaN" if value != value else value


def unreal(value) -> float:
    """Back from a REAL column: NULL -> NaN (not recorded), 'NaN' -> NaN."""
    if value is None:
        return float("nan")
    return float(value)


_RANK_RE = re.compile(r"(\.node\d+)?\.rank(\d+)$")
RUN_SUFFIXES = (EXTENSION, ".sqlite", ".db")


def rank_path(path: str | os.PathLike, rank: int, world_size: int, node: int = 0, n_nodes: int = 1) -> Path:
    """The file of one rank: ``run.gvrun`` -> ``run.rank0.gvrun`` (when world_size > 1), and
    ``run.node1.rank5.gvrun`` when the world spans several nodes (hosts).

    A path containing ``{rank}`` (and ``{node}``) is formatted instead (``runs/r{rank}.gvrun``).
    """
    text = os.fspath(path)
    if "{rank}" in text or "{node}" in text:         # replaced, not str.format: other braces stay as they are
        return Path(text.replace("{rank}", str(rank)).replace("{node}", str(node)))
    p = Path(text)
    if world_size <= 1:
        return p
    suffix = p.suffix or EXTENSION
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    where = f".node{node}" if n_nodes > 1 else ""
    return p.with_name(f"{stem}{where}.rank{rank}{suffix}")


def rank_files(path: str | os.PathLike) -> list[Path]:
    """All files of a run: the path itself if it exists, and its ``.rankN`` (``.nodeM.rankN``)
    siblings, sorted by rank; or, for a folder, the rank files of the one run it holds.

    ``run.gvrun`` or ``run.rank1.gvrun`` -> [run.rank0.gvrun, run.rank1.gvrun, ...].
    Raises ``RecordError`` for a folder holding no run or several.
    """
    p = Path(path)
    if p.is_dir():
        return _folder_run(p)
    suffix = p.suffix
    stem = p.name[: -len(suffix)] if suffix else p.name
    base = _RANK_RE.sub("", stem)
    found: dict[int, Path] = {}
    if p.parent.is_dir():
        pattern = re.compile(re.escape(base) + r"(\.node\d+)?\.rank(\d+)" + re.escape(suffix) + "$")
        for sibling in p.parent.iterdir():
            m = pattern.match(sibling.name)
            if m:
                found[int(m.group(2))] = sibling
    if found:
        return [found[r] for r in sorted(found)]
    return [p]


def _folder_run(folder: Path) -> list[Path]:
    runs: dict[str, list[Path]] = {}
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.suffix in RUN_SUFFIXES:
            runs.setdefault(_RANK_RE.sub("", f.name[: -len(f.suffix)]) + f.suffix, []).append(f)
    if not runs:
        raise RecordError("no run files (*.gvrun) in this folder", folder)
    if len(runs) > 1:
        raise RecordError(f"this folder holds {len(runs)} runs ({', '.join(sorted(runs)[:6])}): open one of "
                          "their files", folder)
    (files,) = runs.values()
    return rank_files(files[0])
