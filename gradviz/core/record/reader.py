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

Hostile or damaged files: only regular files are opened (a FIFO, device or socket would
block or stream forever); every value taken from the file is type-checked (``validate``):
a wrong one is "corrupted run file". A killed run on a read-only mount whose ``-shm`` is
missing (SQLite cannot build its WAL index there) is read from a private copy of the file
and its ``-wal``; a WAL-mode file copied without its ``-wal`` says so (``notes``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from gradviz.core.stats import tensors as gstats
from gradviz.core.record.schema import APPLICATION_ID, SCHEMA_VERSION, TABLES, RecordError, from_blob, rank_files
from gradviz.core.record.validate import check_meta, corrupted, int_cell, real_cell

log = logging.getLogger(__name__)

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
        self._conn: sqlite3.Connection | None = None
        self._copy: str | None = None            # a private copy's folder (a read-only mount), removed at close
        self.notes: list[str] = []               # what the reader could not read, in words (runs show prints them)
        _check_regular(self.path)
        wal_mode = self._check_header()
        try:
            self._open(wal_mode)
            self._validate(wal_mode)
            self.meta: dict[str, Any] = self._read_meta()
        except RecordError:
            self.close()
            raise
        except sqlite3.Error as exc:
            self.close()
            raise _sqlite_error(exc, self.path) from None
        self.param_names: list[str] = list(self.meta.get("param_names") or [])
        self.rank: int = self.meta.get("rank", 0)
        self.world_size: int = self.meta.get("world_size", 1)
        # parameters added under the watch (model_follow): earlier rows hold fewer columns
        self._grows = bool(self.meta.get("model_changes"))
        self._graph_cache: dict[int, tuple[list[str], nx.DiGraph]] = {}
        if wal_mode and not _exists(f"{self.path}-wal") and self.meta.get("status") == "running":
            self.notes.append(f"this run was not closed and its -wal file ({self.path.name}-wal) is not beside it: "
                              "steps written after its last checkpoint are missing (copy the -wal with it)")

    def _open(self, wal_mode: bool) -> None:
        try:
            self._conn = _connect(self.path, wal_mode)
            self._conn.execute("PRAGMA user_version").fetchone()      # SQLite opens the file lazily
        except sqlite3.OperationalError as exc:
            if not (wal_mode and "unable to open" in str(exc) and _exists(f"{self.path}-wal")):
                raise
            # a killed run on a read-only mount without its -shm: SQLite can neither build the WAL
            # index beside it nor read it without one. A private copy reads it all, the file untouched.
            self.close()
            self._conn = self._private_copy()

    def _private_copy(self) -> sqlite3.Connection:
        self._copy = tempfile.mkdtemp(prefix="gradviz-run-")
        target = Path(self._copy) / self.path.name
        try:
            shutil.copyfile(self.path, target)
            shutil.copyfile(f"{self.path}-wal", f"{target}-wal")
        except OSError as exc:
            raise RecordError(f"cannot read the run file: it is on a read-only file system without its -shm file, "
                              f"and a private copy failed ({exc})", self.path) from None
        self.notes.append("read from a private copy (a read-only file system, and no -shm beside the -wal)")
        conn = _connect(target, True, "mode=ro")
        conn.execute("PRAGMA user_version").fetchone()
        return conn

    # -- validation -------------------------------------------------------
    def _check_header(self) -> bool:
        """Raises for a file that is not a gradviz run; True when it is in WAL mode."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))   # never waits on a FIFO
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise RecordError("is not a regular file (a FIFO, device or socket): not a run file", self.path)
                head = os.read(fd, 100)
            finally:
                os.close(fd)
        except OSError as exc:
            raise RecordError(f"cannot read the run file ({exc})", self.path) from None
        if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
            raise RecordError("not a gradviz run file (not a SQLite database, or truncated)", self.path)
        app_id = int.from_bytes(head[68:72], "big")
        if app_id != APPLICATION_ID:
            raise RecordError("not a gradviz run file (a SQLite database of another application)", self.path)
        return head[18] == 2                 # file format "read version" 2: WAL

    def _validate(self, wal_mode: bool) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise RecordError(f"written by a newer gradviz (run format {version}; this gradviz reads up to "
                              f"{SCHEMA_VERSION}): upgrade gradviz to open it", self.path)
        if version < 1:
            raise RecordError("not a gradviz run file (no run format version)", self.path)
        names = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = TABLES - names
        if missing and wal_mode and not _exists(f"{self.path}-wal"):
            raise RecordError(f"the run's tables are in its -wal file, which is not beside it ({self.path.name}-wal "
                              "missing: copied without it?); copy run.gvrun-wal along with the run, or close the "
                              "run before copying it", self.path)
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
            except (TypeError, ValueError, RecursionError):
                raise corrupted(self.path, f"meta entry {str(key)[:40]!r} is not JSON") from None
        check_meta(meta, self.path)
        return meta

    def close(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None
        copy, self._copy = getattr(self, "_copy", None), None
        if copy is not None:
            shutil.rmtree(copy, ignore_errors=True)

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
        got = self._query("SELECT MAX(step) FROM steps")[0][0]
        return None if got is None else int_cell(got, "step", self.path)

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
        n, path = len(rows), self.path
        out: dict[str, np.ndarray] = {"step": np.array([int_cell(r[0], "step", path) for r in rows], dtype=np.int64)}
        for i, key in enumerate(STEP_FIELDS[1:], start=1):
            out[key] = np.array([real_cell(r[i], key, path) for r in rows], dtype=np.float64)
        out["node_sampled"] = np.array([bool(int_cell(r[6], "node_sampled", path)) for r in rows], dtype=bool)
        out["loss_given"] = np.array([bool(r[7]) for r in rows], dtype=bool)
        if arrays:
            p = len(self.param_names)
            norms = np.full((n, p), np.nan)
            ratios = np.full((n, p), np.nan)
            absent = np.zeros((n, p), dtype=bool)      # columns of parameters added after this step
            for i, r in enumerate(rows):
                if r[8] is not None:
                    values = self._blob(r[8], p, "grad_norms")
                    norms[i, :values.size] = values
                    absent[i, values.size:] = True
                if r[9] is not None:
                    values = self._blob(r[9], p, "update_ratios")
                    ratios[i, :values.size] = values
            has = (norms != -1.0) & ~absent
            norms[~has] = np.nan
            out["grad_norms"] = norms
            out["has_grad"] = has
            out["update_ratios"] = ratios
        return out

    def _blob(self, blob: Any, p: int, column: str) -> np.ndarray:
        if type(blob) is not bytes:
            raise corrupted(self.path, f"column {column!r} holds {type(blob).__name__}, not float32 bytes")
        try:
            values = from_blob(blob, None if self._grows else p)
        except RecordError as exc:
            raise corrupted(self.path, f"column {column!r}: {exc.message}") from None
        if values.size > p:
            raise corrupted(self.path, f"column {column!r} holds {values.size} values for {p} parameters")
        return values

    def step_row(self, step: int) -> dict[str, Any] | None:
        got = self.steps(int(step) - 1)
        if not len(got["step"]) or got["step"][0] != step:
            return None
        return {k: v[0] for k, v in got.items()}

    # -- graphs and node norms ---------------------------------------------
    def graph_ids(self) -> list[tuple[int, int, str]]:
        """[(graph id, first step, structure hash)] in order."""
        path = self.path
        return [(int_cell(a, "graphs.id", path), int_cell(b, "graphs.step", path), str(c))
                for a, b, c in self._query("SELECT id, step, hash FROM graphs ORDER BY id")]

    def node_steps(self, since: int | None = None) -> list[int]:
        """Steps that have per-node gradient norms."""
        lo = -(2 ** 62) if since is None else int(since)
        return [int_cell(r[0], "node_norms.step", self.path)
                for r in self._query("SELECT step FROM node_norms WHERE step > ? ORDER BY step", (lo,))]

    def graph_id_at(self, step: int) -> int | None:
        """The id of the graph structure whose node norms were recorded at ``step`` (None: none there)."""
        rows = self._query("SELECT graph_id FROM node_norms WHERE step = ?", (int(step),))
        return int_cell(rows[0][0], "node_norms.graph_id", self.path) if rows else None

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
            if type(nodes) is not list or not all(type(n) is str for n in nodes):
                raise TypeError("its node list is not a list of ids")
            g = graph_from_json(data)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise corrupted(self.path, f"graph {graph_id} ({str(exc)[:200]})") from None
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
        s, gid = int_cell(s, "node_norms.step", self.path), int_cell(gid, "node_norms.graph_id", self.path)
        got = self._graph(gid)
        if got is None:
            return None
        nodes = got[0]
        if type(blob) is not bytes:
            raise corrupted(self.path, f"node norms of step {s} are {type(blob).__name__}, not float32 bytes")
        try:
            values = from_blob(blob, len(nodes))
        except RecordError as exc:
            raise corrupted(self.path, f"node norms of step {s}: {exc.message}") from None
        return s, {nid: (None if v == -1.0 else float(v)) for nid, v in zip(nodes, values)}

    def graph_at(self, step: int | None = None) -> nx.DiGraph | None:
        """The graph in use at ``step`` with ``grad_norm`` filled from that step's node norms
        and parameter gradient norms (the nearest recorded step at or before it)."""
        got = self.node_norms(step)
        if got is None:
            return self.graph()
        s, norms = got
        g = self.graph(self.graph_id_at(s))
        if g is None:                                  # node norms whose graph is missing
            return self.graph()
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


# node attributes the readers' side computes with (compare's structure keys, analysis): text or nothing
_TEXT_ATTRS = ("kind", "module", "label", "param")


def graph_from_json(data: dict) -> nx.DiGraph:
    """The graph of ``graph_to_json``; ``TypeError``/``KeyError`` for JSON of another shape."""
    if type(data) is not dict or type(data.get("nodes")) is not list or type(data.get("edges")) is not list:
        raise TypeError("not a graph's JSON (graph, nodes, edges)")
    if type(data.get("graph") or {}) is not dict:
        raise TypeError("graph attributes are not an object")
    g = nx.DiGraph()
    g.graph.update(data.get("graph") or {})
    for node in data["nodes"]:
        if type(node) is not dict or type(node.get("id")) is not str:
            raise TypeError("a node is not an object with a text id")
        bad = [k for k in _TEXT_ATTRS if node.get(k) is not None and type(node[k]) is not str]
        if bad:
            raise TypeError(f"node {node['id'][:40]!r}: {bad[0]} is not text")
        attrs = dict(node)
        nid = attrs.pop("id")
        for k, v in _EMPTY_GRAD.items():
            attrs.setdefault(k, v)
        g.add_node(nid, **attrs)
    for edge in data["edges"]:
        if type(edge) is not dict or type(edge.get("source")) is not str or type(edge.get("target")) is not str:
            raise TypeError("an edge is not an object with text source and target")
        attrs = dict(edge)
        u, v = attrs.pop("source"), attrs.pop("target")
        g.add_edge(u, v, **attrs)
    g.graph.setdefault("loss", None)
    g.graph.setdefault("modules", {})
    return g


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _check_regular(path: Path) -> None:
    """Only a regular file is opened: a FIFO would block the reader forever, a device stream."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise RecordError("no such run file", path) from None
    except OSError as exc:
        raise RecordError(f"cannot read the run file ({exc.strerror or exc})", path) from None
    if stat.S_ISDIR(st.st_mode):
        raise RecordError("is a directory, not a run file", path)
    if not stat.S_ISREG(st.st_mode):
        raise RecordError("is not a regular file (a FIFO, device or socket): not a run file", path)
    for side in ("-wal", "-shm"):                   # SQLite opens these beside it: the same rule
        try:
            st = os.stat(f"{path}{side}")
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"its {side} file is not a regular file (a FIFO, device or socket): not read", path)


def _text(raw: bytes) -> str:
    # a damaged file's text need not be UTF-8: what is not becomes U+FFFD (and then fails as JSON, cleanly)
    return raw.decode("utf-8", "replace")


def _connect(path: Path, wal_mode: bool, mode: str | None = None) -> sqlite3.Connection:
    """A read-only connection (see the module docstring): ``immutable`` for a WAL file that no
    writer has open (a writer keeps its ``-wal`` while it runs), ``mode=ro`` otherwise."""
    uri = path.resolve().as_uri()
    if mode is None:
        mode = "immutable=1" if wal_mode and not Path(f"{path}-wal").exists() else "mode=ro"
    conn = sqlite3.connect(f"{uri}?{mode}", uri=True, check_same_thread=False)
    conn.text_factory = _text
    return conn


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
