"""``RunWriter``: append steps, graphs and node norms to a run file.

The database is opened and the meta row written in the constructor, so an
unwritable path or a full disk raises ``RecordError`` right away. Rows are
buffered and committed in small batches (``commit_every`` rows or
``commit_seconds``, whichever first): a process killed with SIGKILL leaves a file
holding everything up to the last commit (WAL mode, ``synchronous=NORMAL``).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from gradviz.core.record.schema import (APPLICATION_ID, DDL, SCHEMA_VERSION, RecordError, real, to_blob)

log = logging.getLogger(__name__)


def _error(exc: BaseException, path: Path, doing: str) -> RecordError:
    text = str(exc)
    if "full" in text.lower():
        text = f"disk full while {doing} ({text})"
    elif "readonly" in text.lower() or "unable to open" in text.lower() or isinstance(exc, PermissionError):
        text = f"cannot write the run file ({text})"
    else:
        text = f"{doing} failed: {text}"
    return RecordError(text, path)


def is_gradviz_run(path: Path) -> bool:
    """True if ``path`` is a SQLite file carrying the gradviz application id."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError:
        return False
    return (len(head) == 100 and head.startswith(b"SQLite format 3\x00")
            and int.from_bytes(head[68:72], "big") == APPLICATION_ID)


class RunWriter:
    """Writes one run file. Its methods may be called from several threads (the loop's and the
    watch's background commits): one lock serialises them."""

    def __init__(self, path: str | os.PathLike, meta: dict[str, Any], *, overwrite: bool = True,
                 commit_every: int = 1000, commit_seconds: float = 0.5) -> None:
        self.path = Path(path)
        self.commit_every = max(1, int(commit_every))
        self.commit_seconds = float(commit_seconds)
        self._steps: list[tuple] = []
        self._nodes: list[tuple] = []
        self._last_commit = time.monotonic()
        self.committed_step: int | None = None     # last step durably in the file
        self._last_step: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        # called first by commit(): lets an owner that buffers rows itself hand them over
        self.before_commit = None
        self._open(meta, overwrite)

    # -- opening ----------------------------------------------------------
    def _open(self, meta: dict[str, Any], overwrite: bool) -> None:
        path = self.path
        if path.is_dir():
            raise RecordError("is a directory, not a run file", path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _error(exc, path, "creating the folder") from None
        if path.exists():
            if path.stat().st_size and not is_gradviz_run(path):
                raise RecordError("exists and is not a gradviz run; refusing to overwrite it", path)
            if not overwrite:
                raise RecordError("a run file already exists here (pass overwrite=True)", path)
            for extra in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
                try:
                    extra.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise _error(exc, path, "replacing the old run") from None
        try:
            conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _error(exc, path, "opening") from None
        self._conn = conn
        try:
            # identity first, in rollback-journal mode, so it lands in the main file's header
            # (readers check it before trusting the file, even while the WAL is not checkpointed)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN")
            for stmt in DDL.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in meta.items()])
            conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self._abort()
            raise _error(exc, path, "creating the run file") from None

    def _abort(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
            self._conn = None

    @property
    def closed(self) -> bool:
        return self._conn is None

    # -- writing ------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self._execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def add_step(self, step: int, *, time: float, loss: float | None, grad_norm: float | None,
                 lr: float | None, update_ratio: float | None, grad_norms: Sequence[float] | bytes | None,
                 update_ratios: Sequence[float] | bytes | None, node_sampled: bool = False,
                 commit: bool = True) -> None:
        """Buffer one step row (committed with the next batch; ``commit=False``: never here)."""
        self._steps.append((
            int(step), float(time), real(loss), real(grad_norm), real(lr), real(update_ratio),
            _blob(grad_norms), _blob(update_ratios), int(bool(node_sampled))))
        self._last_step = int(step)
        if commit:
            self.maybe_commit()

    def add_step_rows(self, rows: list[tuple]) -> None:
        """Buffer ready-made step rows ``(step, time, loss, grad_norm, lr, update_ratio,
        grad_norms blob, update_ratios blob, node_sampled)`` (no commit here)."""
        if rows:
            self._steps.extend(rows)
            self._last_step = int(rows[-1][0])

    def add_graph(self, step: int, structure_hash: str, nodes: list[str], graph_json: str) -> int:
        """Store a graph structure now (committed at once); returns its id."""
        with self._lock:
            self._commit()
            cur = self._execute("INSERT INTO graphs(step, hash, nodes, graph) VALUES (?, ?, ?, ?)",
                                (int(step), structure_hash, json.dumps(nodes), graph_json))
            return int(cur.lastrowid)

    def update_graph(self, graph_id: int, graph_json: str) -> None:
        """Replace the JSON of a stored structure (same node ids, more attributes)."""
        with self._lock:
            self._commit()
            self._execute("UPDATE graphs SET graph = ? WHERE id = ?", (graph_json, int(graph_id)))

    def add_node_norms(self, step: int, graph_id: int, norms: Sequence[float] | bytes) -> None:
        self._nodes.append((int(step), int(graph_id), _blob(norms)))

    def maybe_commit(self) -> None:
        if len(self._steps) >= self.commit_every or time.monotonic() - self._last_commit >= self.commit_seconds:
            self.commit()

    def commit(self) -> None:
        """Write the buffered rows in one transaction."""
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        self._last_commit = time.monotonic()
        if self.before_commit is not None:
            fn = self.before_commit()
            if fn is not None:
                fn()
        if not self._steps and not self._nodes:
            return
        conn = self._require()
        try:
            conn.execute("BEGIN")
            if self._steps:
                _insert_many(conn, "steps", 9, self._steps)
            if self._nodes:
                conn.executemany("INSERT OR REPLACE INTO node_norms VALUES (?, ?, ?)", self._nodes)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise _error(exc, self.path, "writing steps") from None
        self._steps.clear()
        self._nodes.clear()
        self.committed_step = self._last_step

    def close(self) -> None:
        """Commit, fold the WAL into the file and leave it in rollback-journal mode: a closed run
        is then one self-contained file that read-only readers open without creating any."""
        with self._lock:
            if self._conn is None:
                return
            try:
                self._commit()
                try:
                    self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    self._conn.execute("PRAGMA journal_mode=DELETE")
                except sqlite3.Error:        # a reader holds it open: it stays a WAL file, still complete
                    log.debug("run file %s left in WAL mode", self.path, exc_info=True)
            finally:
                self._abort()

    # -- helpers ------------------------------------------------------------
    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RecordError("the run file is closed", self.path)
        return self._conn

    def _execute(self, sql: str, params: tuple) -> sqlite3.Cursor:
        with self._lock:
            conn = self._require()
            try:
                return conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise _error(exc, self.path, "writing") from None


_ROWS_PER_INSERT = 50           # 450 parameters per statement: under SQLite's oldest limit (999)


def _insert_many(conn: sqlite3.Connection, table: str, width: int, rows: list[tuple]) -> None:
    """``INSERT OR REPLACE`` of many rows, 50 per statement (~30 % cheaper per row than
    ``executemany``, which binds and steps one row at a time)."""
    full = len(rows) - len(rows) % _ROWS_PER_INSERT
    if full:
        one = "(" + ", ".join("?" * width) + ")"
        sql = f"INSERT OR REPLACE INTO {table} VALUES " + ", ".join([one] * _ROWS_PER_INSERT)
        chain = itertools.chain.from_iterable
        for k in range(0, full, _ROWS_PER_INSERT):
            conn.execute(sql, tuple(chain(rows[k:k + _ROWS_PER_INSERT])))
    if full < len(rows):
        conn.executemany(f"INSERT OR REPLACE INTO {table} VALUES (" + ", ".join("?" * width) + ")", rows[full:])


def _blob(values) -> bytes | None:
    if values is None:
        return None
    if isinstance(values, (bytes, bytearray, memoryview)):
        return bytes(values)
    return to_blob(values)
