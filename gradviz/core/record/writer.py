"""``RunWriter``: append steps, graphs and node norms to a run file.

The database is opened and the meta row written in the constructor, so an
unwritable path, a too long one or a full disk raises ``RecordError`` right away (and
leaves no file behind). The writer holds the run's lock (``lock.WriterLock``) from before
it looks at the path until it closes: a second writer is refused and never unlinks the
first one's files. Rows are buffered and committed in small batches (``commit_every`` rows
or ``commit_seconds``, whichever first): a process killed with SIGKILL leaves a file
holding everything up to the last commit (WAL mode, ``synchronous=NORMAL``). A commit that
fails (or is interrupted) rolls back and keeps its rows for the next one; ``failure``
says why until one succeeds.
"""
from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from gradviz.core.record.lock import LockHeld, WriterLock
from gradviz.core.record.schema import (APPLICATION_ID, DDL, SCHEMA_VERSION, RecordError, real, to_blob)

log = logging.getLogger(__name__)


_ERRNO_TEXT = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.ENAMETOOLONG: "the path is too long", errno.ENOENT: "no such folder",
               errno.ENOTDIR: "a part of the path is a file, not a folder"}


def _error(exc: BaseException, path: Path, doing: str) -> RecordError:
    """A ``RecordError`` naming the cause: disk full, read-only, permissions, a bad path."""
    text = str(exc)
    low = text.lower()
    cause = _ERRNO_TEXT.get(getattr(exc, "errno", None))
    if cause is not None:
        text = f"{cause} while {doing} ({getattr(exc, 'strerror', None) or text})"
    elif "full" in low:
        text = f"disk full while {doing} ({text})"
    elif "readonly" in low or "read-only" in low or "unable to open" in low or isinstance(exc, PermissionError):
        text = f"cannot write the run file ({text})"
    elif "disk i/o" in low:
        text = f"the disk failed while {doing} ({text}): is the file system full, read-only or gone?"
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


_SIDE_FILES = ("-wal", "-shm", "-journal")


class RunWriter:
    """Writes one run file. Its methods may be called from several threads (the loop's and the
    watch's background commits): one lock serialises them.

    ``failure`` is the ``RecordError`` of the last commit that failed (disk full, read-only,
    the file removed), None once a commit succeeds again: the rows stay buffered meanwhile.
    The watch reads it at every step, whichever thread's commit failed."""

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
        self._writer_lock: WriterLock | None = None
        self._inode: int | None = None
        self.failure: RecordError | None = None
        # called first by commit(): lets an owner that buffers rows itself hand them over
        self.before_commit = None
        self._open(meta, overwrite)

    # -- opening ----------------------------------------------------------
    def _open(self, meta: dict[str, Any], overwrite: bool) -> None:
        path = self.path
        try:
            if path.is_dir():
                raise RecordError("is a directory, not a run file", path)
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _error(exc, path, "creating the folder") from None
        self._existing(path)                   # before a lock file is made beside a device or a link
        try:
            self._writer_lock = WriterLock(path)
        except LockHeld as held:
            who = "another watch of this process" if held.same_process else f"another watch ({held.holder})"
            raise RecordError(f"{who} is recording into this run file: refusing to replace it (close that "
                              "watch first, or record to another path)", path) from None
        except OSError as exc:
            raise _error(exc, path, "locking the run file") from None
        created: list[Path] = []
        try:
            self._replace_old(path, overwrite)
            created = [p for p in (path, *(Path(f"{path}{s}") for s in _SIDE_FILES)) if not os.path.lexists(p)]
            self._create(meta)
        except BaseException:
            self._abort()
            for p in created:                  # never leave a 0-byte run (a full disk at the start)
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.warning("gradviz.watch: could not remove %s after a failed start (%s)", p, exc)
            raise

    @staticmethod
    def _existing(path: Path) -> os.stat_result | None:
        """The file already at ``path`` (None: nothing); refuses a link, FIFO, device or socket."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _error(exc, path, "looking at the run file") from None
        if stat.S_ISLNK(st.st_mode):
            raise RecordError("is a symbolic link; refusing to replace it (give the path of the file itself)", path)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError("exists and is not a regular file (a FIFO, device or socket); refusing to touch it",
                              path)
        return st

    def _replace_old(self, path: Path, overwrite: bool) -> None:
        """Refuse what is not an old run of ours; unlink an old run (no writer holds it: we hold its lock)."""
        st = self._existing(path)
        if st is None:
            return
        if st.st_size and not is_gradviz_run(path):
            raise RecordError("exists and is not a gradviz run; refusing to overwrite it", path)
        if not overwrite:
            raise RecordError("a run file already exists here (pass overwrite=True)", path)
        for extra in (path, *(Path(f"{path}{s}") for s in _SIDE_FILES)):
            try:
                extra.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise _error(exc, path, "replacing the old run") from None

    def _create(self, meta: dict[str, Any]) -> None:
        path = self.path
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
            # the tables and meta into the main file at once: a copy made without its -wal then
            # still opens (with the steps of the last checkpoint) and says what is missing
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            self._inode = os.stat(path).st_ino      # commits check the name still leads to this file
        except (sqlite3.Error, OSError) as exc:
            raise _error(exc, path, "creating the run file") from None

    def _abort(self) -> None:
        """Close the connection and release the writer's lock (nothing is committed here)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error as exc:
                log.debug("closing %s: %s", self.path, exc)
            self._conn = None
        if self._writer_lock is not None:
            self._writer_lock.release()
            self._writer_lock = None

    def abandon(self) -> None:
        """Give up: close without committing (what is buffered is lost) and release the lock."""
        with self._lock:
            self._abort()

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
            if self.failure is not None and self._conn is not None:
                self._check_still_there()
                self.failure = None           # nothing is held, nothing at risk: the next commit tells
            return
        conn = self._require()
        self._check_still_there()
        try:
            conn.execute("BEGIN")
            if self._steps:
                _insert_many(conn, "steps", 9, self._steps)
            if self._nodes:
                conn.executemany("INSERT OR REPLACE INTO node_norms VALUES (?, ?, ?)", self._nodes)
            conn.execute("COMMIT")
        except BaseException as exc:
            # whatever stopped it (an error, Ctrl-C inside the transaction) the rows stay buffered
            # for the next commit and the connection leaves the transaction it was in
            _rollback(conn)
            if isinstance(exc, sqlite3.Error):
                raise self._failed(_error(exc, self.path, "writing steps")) from None
            raise
        self._steps.clear()
        self._nodes.clear()
        self.committed_step = self._last_step
        self.failure = None

    def _failed(self, error: RecordError) -> RecordError:
        self.failure = error
        return error

    def _check_still_there(self) -> None:
        """SQLite writes on into a file whose name was removed (or replaced): nothing would reach
        the run file the user will open, so that is a failed commit too."""
        try:
            inode = os.stat(self.path).st_ino
        except OSError:
            inode = None
        if inode != self._inode:
            raise self._failed(RecordError("the run file was removed or replaced while recording (nothing "
                                           "written since then can reach it)", self.path))

    @property
    def held_rows(self) -> int:
        """Step rows handed over and not yet committed."""
        return len(self._steps)

    def close(self) -> None:
        """Commit, fold the WAL into the file and leave it in rollback-journal mode: a closed run
        is then one self-contained file that read-only readers open without creating any.

        A commit that fails closes the file all the same (the error is raised); an interrupt
        (Ctrl-C) leaves it open, so that the watch's exit handler can still commit the rows."""
        with self._lock:
            if self._conn is None:
                return
            try:
                self._commit()
            except RecordError:
                self._abort()
                raise
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
                raise self._failed(_error(exc, self.path, "writing")) from None


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:          # SQLite rolled back on its own (a full disk does)
            log.debug("rollback: %s", exc)


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
