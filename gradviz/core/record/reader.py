"""``RunReader``: open a run file read-only and read its steps, norms and graphs.

Opening never executes code and never unpickles: the file is SQLite holding
numbers, float32 arrays and JSON text. A file that is not a gradviz run (text,
another application's SQLite database, truncated or corrupted) or one written by
a newer gradviz (``user_version`` above ``SCHEMA_VERSION``) raises ``RecordError``.

A reader never changes a run file: its connection is read-only (``mode=ro``), and a
WAL-mode file that no writer has open (no ``-wal`` beside it) is opened ``immutable`` so
SQLite creates nothing next to it. (A live writer's WAL is read, never checkpointed; only
SQLite's shared-memory index ``-shm`` sees read locks.) A reader may follow a file another
process is still writing: ``steps(since)`` returns the rows committed after a given step
(cheap: primary-key range query).
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from gradviz.core.stats import tensors as gstats
from gradviz.core.record.schema import (APPLICATION_ID, SCHEMA_VERSION, TABLES, RecordError, from_blob,
                                        rank_files, unreal)

STEP_FIELDS = ("step", "time", "loss", "grad_norm", "lr", "update_ratio")


def _sqlite_error(exc: BaseException, path: Path) -> RecordError:
    text = str(exc)
    if "not a database" in text or "malformed" in text or "disk image" in text:
        return RecordError(f"not a gradviz run file (corrupted or not SQLite: {text})", path)
    return RecordError(f"cannot read the run file ({text})", path)


class RunReader:
    """A run file opened for reading (safe to use while another process writes it)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise RecordError("no such run file", self.path)
        if self.path.is_dir():
            raise RecordError("is a directory, not a run file", self.path)
        wal_mode = self._check_header()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = _connect(self.path, wal_mode)
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, self.path) from None
        try:
            self._validate()
            self.meta: dict[str, Any] = self._read_meta()
        except RecordError:
            self.close()
            raise
        except sqlite3.Error as exc:
            self.close()
            raise _sqlite_error(exc, self.path) from None
        self.param_names: list[str] = list(self.meta.get("param_names") or [])
        self.rank: int = int(self.meta.get("rank") or 0)
        self.world_size: int = int(self.meta.get("world_size") or 1)
        self._graph_cache: dict[int, tuple[list[str], nx.DiGraph]] = {}

    # -- validation -------------------------------------------------------
    def _check_header(self) -> bool:
        """Raises for a file that is not a gradviz run; True when it is in WAL mode."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(100)
        except OSError as exc:
            raise RecordError(f"cannot read the run file ({exc})", self.path) from None
        if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
            raise RecordError("not a gradviz run file (not a SQLite database, or truncated)", self.path)
        app_id = int.from_bytes(head[68:72], "big")
        if app_id != APPLICATION_ID:
            raise RecordError("not a gradviz run file (a SQLite database of another application)", self.path)
        return head[18] == 2                 # file format "read version" 2: WAL

    def _validate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RecordError(f"written by a newer gradviz (run format {version}; this gradviz reads up to "
                              f"{SCHEMA_VERSION}): upgrade gradviz to open it", self.path)
        if version < 1:
            raise RecordError("not a gradviz run file (no run format version)", self.path)
        names = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = TABLES - names
        if missing:
            raise RecordError(f"not a complete gradviz run file (missing tables: {', '.join(sorted(missing))})",
                              self.path)
        check = self._conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        if check != "ok":
            raise RecordError(f"the run file is corrupted ({check})", self.path)

    def _read_meta(self) -> dict[str, Any]:
        meta = {}
        for key, value in self._conn.execute("SELECT key, value FROM meta"):
            try:
                meta[key] = json.loads(value)
            except (TypeError, ValueError):
                raise RecordError(f"corrupted meta entry {key!r}", self.path) from None
        return meta

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None

    def __enter__(self) -> "RunReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        if self._conn is None:
            raise RecordError("the run file is closed", self.path)
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise _sqlite_error(exc, self.path) from None

    # -- steps ------------------------------------------------------------
    def n_steps(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM steps")[0][0])

    def last_step(self) -> int | None:
        return self._query("SELECT MAX(step) FROM steps")[0][0]

    def steps(self, since: int | None = None, *, arrays: bool = True) -> dict[str, np.ndarray]:
        """Columns of the steps after ``since`` (all when None) as numpy arrays.

        Keys: step, time, loss, grad_norm, lr, update_ratio, node_sampled, ``loss_given``
        (False where no loss was recorded; ``loss`` is NaN there and where it was NaN), and
        (``arrays``) ``grad_norms`` (n_steps x n_params; NaN = no gradient),
        ``has_grad`` (bool, same shape) and ``update_ratios`` (NaN = not recorded).
        """
        cols = "step, time, loss, grad_norm, lr, update_ratio, node_sampled, loss IS NOT NULL"
        if arrays:
            cols += ", grad_norms, update_ratios"
        lo = -(2 ** 62) if since is None else int(since)
        rows = self._query(f"SELECT {cols} FROM steps WHERE step > ? ORDER BY step", (lo,))
        return self._columns(rows, arrays)

    def _columns(self, rows: list[tuple], arrays: bool) -> dict[str, np.ndarray]:
        n = len(rows)
        out: dict[str, np.ndarray] = {"step": np.array([r[0] for r in rows], dtype=np.int64)}
        for i, key in enumerate(STEP_FIELDS[1:], start=1):
            out[key] = np.array([unreal(r[i]) for r in rows], dtype=np.float64)
        out["node_sampled"] = np.array([bool(r[6]) for r in rows], dtype=bool)
        out["loss_given"] = np.array([bool(r[7]) for r in rows], dtype=bool)
        if arrays:
            p = len(self.param_names)
            norms = np.full((n, p), np.nan)
            ratios = np.full((n, p), np.nan)
            for i, r in enumerate(rows):
                if r[8] is not None:
                    norms[i] = from_blob(r[8], p)
                if r[9] is not None:
                    ratios[i] = from_blob(r[9], p)
            has = norms != -1.0
            norms[~has] = np.nan
            out["grad_norms"] = norms
            out["has_grad"] = has
            out["update_ratios"] = ratios
        return out

    def step_row(self, step: int) -> dict[str, Any] | None:
        got = self.steps(int(step) - 1)
        if not len(got["step"]) or got["step"][0] != step:
            return None
        return {k: v[0] for k, v in got.items()}

    # -- graphs and node norms ---------------------------------------------
    def graph_ids(self) -> list[tuple[int, int, str]]:
        """[(graph id, first step, structure hash)] in order."""
        return [(int(a), int(b), str(c)) for a, b, c in self._query("SELECT id, step, hash FROM graphs ORDER BY id")]

    def node_steps(self, since: int | None = None) -> list[int]:
        """Steps that have per-node gradient norms."""
        lo = -(2 ** 62) if since is None else int(since)
        return [int(r[0]) for r in self._query("SELECT step FROM node_norms WHERE step > ? ORDER BY step", (lo,))]

    def graph_id_at(self, step: int) -> int | None:
        """The id of the graph structure whose node norms were recorded at ``step`` (None: none there)."""
        rows = self._query("SELECT graph_id FROM node_norms WHERE step = ?", (int(step),))
        return int(rows[0][0]) if rows else None

    def graph(self, graph_id: int | None = None) -> nx.DiGraph | None:
        """The stored structure as an ``nx.DiGraph`` in the schema of ARCHITECTURE.md
        (``grad_*`` None; the latest structure when ``graph_id`` is None)."""
        got = self._graph(graph_id)
        return got[1].copy() if got else None

    def _graph(self, graph_id: int | None) -> tuple[list[str], nx.DiGraph] | None:
        if graph_id is None:
            rows = self._query("SELECT id FROM graphs ORDER BY id DESC LIMIT 1")
            if not rows:
                return None
            graph_id = int(rows[0][0])
        if graph_id in self._graph_cache:
            return self._graph_cache[graph_id]
        rows = self._query("SELECT nodes, graph FROM graphs WHERE id = ?", (int(graph_id),))
        if not rows:
            return None
        try:
            nodes = json.loads(rows[0][0])
            data = json.loads(rows[0][1])
            g = graph_from_json(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise RecordError(f"corrupted graph {graph_id} ({exc})", self.path) from None
        self._graph_cache[graph_id] = (nodes, g)
        return nodes, g

    def node_norms(self, step: int | None = None) -> tuple[int, dict[str, float | None]] | None:
        """(step, {node id: norm}) at ``step`` (the nearest recorded one at or before it;
        the last one when None). None for "no gradient", NaN/inf kept."""
        if step is None:
            rows = self._query("SELECT step, graph_id, norms FROM node_norms ORDER BY step DESC LIMIT 1")
        else:
            rows = self._query("SELECT step, graph_id, norms FROM node_norms WHERE step <= ? "
                               "ORDER BY step DESC LIMIT 1", (int(step),))
            if not rows:
                rows = self._query("SELECT step, graph_id, norms FROM node_norms ORDER BY step LIMIT 1")
        if not rows:
            return None
        s, gid, blob = rows[0]
        got = self._graph(int(gid))
        if got is None:
            return None
        nodes = got[0]
        values = from_blob(blob, len(nodes))
        return int(s), {nid: (None if v == -1.0 else float(v)) for nid, v in zip(nodes, values)}

    def graph_at(self, step: int | None = None) -> nx.DiGraph | None:
        """The graph in use at ``step`` with ``grad_norm`` filled from that step's node norms
        and parameter gradient norms (the nearest recorded step at or before it)."""
        got = self.node_norms(step)
        if got is None:
            return self.graph()
        s, norms = got
        g = self.graph(self.graph_id_at(s))
        for nid, norm in norms.items():
            if nid in g:
                g.nodes[nid]["grad_norm"] = norm
        row = self.step_row(s)
        if row is not None:
            for name, norm, has in zip(self.param_names, row["grad_norms"], row["has_grad"]):
                nid = f"param:{name}"
                if nid in g:
                    g.nodes[nid]["grad_norm"] = float(norm) if has else None
        for nid, attrs in g.nodes(data=True):
            n = attrs.get("grad_norm")
            if n is not None:
                attrs["grad_nan"] = int(math.isnan(n))
                attrs["grad_inf"] = int(math.isinf(n))
        g.graph["step"] = s
        if row is not None:
            g.graph["loss"] = None if math.isnan(row["loss"]) else float(row["loss"])
            for attrs in g.nodes.values():         # what the loss node shows: this step's loss
                if attrs.get("kind") == "loss":
                    attrs["value"] = g.graph["loss"]
        return g


def graph_to_json(g: nx.DiGraph) -> str:
    """Structure of a traced graph as JSON text (gradient/value stats dropped)."""
    nodes = []
    for nid, attrs in g.nodes(data=True):
        keep = {k: v for k, v in attrs.items() if not k.startswith(("grad_", "value_"))}
        keep["id"] = nid
        nodes.append(keep)
    edges = [{"source": u, "target": v, **attrs} for u, v, attrs in g.edges(data=True)]
    graph_attrs = {k: v for k, v in g.graph.items() if k not in ("loss", "trace_seconds")}
    return json.dumps({"graph": graph_attrs, "nodes": nodes, "edges": edges}, default=_json_default)


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


_EMPTY_GRAD = gstats.prefixed(None, "grad")


def graph_from_json(data: dict) -> nx.DiGraph:
    g = nx.DiGraph()
    g.graph.update(data.get("graph") or {})
    for node in data["nodes"]:
        attrs = dict(node)
        nid = attrs.pop("id")
        for k, v in _EMPTY_GRAD.items():
            attrs.setdefault(k, v)
        g.add_node(nid, **attrs)
    for edge in data["edges"]:
        attrs = dict(edge)
        u, v = attrs.pop("source"), attrs.pop("target")
        g.add_edge(u, v, **attrs)
    g.graph.setdefault("loss", None)
    g.graph.setdefault("modules", {})
    return g


def _connect(path: Path, wal_mode: bool) -> sqlite3.Connection:
    """A read-only connection (see the module docstring): ``immutable`` for a WAL file that no
    writer has open (a writer keeps its ``-wal`` while it runs), ``mode=ro`` otherwise."""
    uri = path.resolve().as_uri()
    if wal_mode and not Path(f"{path}-wal").exists():
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)
    return sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)


def open_run(path: str | os.PathLike) -> RunReader:
    """Open one run file (raises ``RecordError`` for a bad one)."""
    return RunReader(path)


def open_ranks(path: str | os.PathLike) -> list[RunReader]:
    """Open every rank file of a run (``run.gvrun`` -> its ``run.rankN.gvrun`` files, or itself)."""
    readers = []
    try:
        for p in rank_files(path):
            readers.append(RunReader(p))
    except RecordError:
        for r in readers:
            r.close()
        raise
    return readers
