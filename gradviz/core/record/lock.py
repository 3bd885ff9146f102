"""One writer per run file: ``WriterLock``, an OS file lock beside the run (``run.gvrun-lock``).

A second ``watch`` on a path that a live watch records into must be refused before it
touches anything (replacing a run unlinks its files). The lock is the kernel's (``flock``
on Linux and macOS, ``msvcrt.locking`` on Windows): it belongs to the open file and so
dies with its process. A killed run leaves its lock file behind, unlocked, and the next
watch takes it over; a clean close removes it.

Taking it: open (or create) the lock file, lock it without waiting, then check that the
name still leads to the file locked (a writer that closed meanwhile unlinks the file it
held: a lock taken on an unlinked file would be nobody's). The holder writes its process
id and host into the file, for the message the refused writer prints. The lock is on a
file of its own, never on the database: SQLite's own locks on the run file stay SQLite's.
"""
from __future__ import annotations

import logging
import os
import socket
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["WriterLock", "LockHeld", "lock_path"]

try:
    import fcntl
except ImportError:                       # Windows
    fcntl = None
    import msvcrt

# paths this process holds, so a refusal can say "another watch of this process"
_held: set[str] = set()
_held_guard = threading.Lock()


class LockHeld(Exception):
    """Another live writer holds the lock; ``holder`` is what it wrote ("pid 12 on host")."""

    def __init__(self, holder: str, same_process: bool) -> None:
        super().__init__(holder)
        self.holder = holder
        self.same_process = same_process


def lock_path(run_path: Path) -> Path:
    return Path(f"{run_path}-lock")


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except (BlockingIOError, PermissionError):
        return False
    except OSError as exc:
        if exc.errno in (11, 13, 35):          # EAGAIN, EACCES, EWOULDBLOCK (macOS)
            return False
        raise
    return True


class WriterLock:
    """Holds ``run.gvrun-lock`` for one writer; ``release()`` unlinks and unlocks it."""

    def __init__(self, run_path: Path) -> None:
        self.path = lock_path(run_path)
        self._key = os.path.abspath(self.path)
        self._fd: int | None = None
        self._acquire()

    def _acquire(self) -> None:
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        for _ in range(20):                    # a writer closing at this very moment: try again
            fd = os.open(self.path, flags, 0o644)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise IsADirectoryError(f"{self.path} is not a regular file")
                if not _try_lock(fd):
                    raise LockHeld(_holder(fd), self._key in _held)
                try:
                    same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:                   # unlinked by the writer that just released it
                    os.close(fd)
                    continue
            except BaseException:
                try:
                    os.close(fd)
                except OSError:
                    pass
                raise
            self._fd = fd
            with _held_guard:
                _held.add(self._key)
            self._write_holder(fd)
            return
        raise OSError(f"{self.path}: the lock file keeps being replaced")

    @staticmethod
    def _write_holder(fd: int) -> None:
        text = f"pid {os.getpid()} on {socket.gethostname()}\n".encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text, 0) if hasattr(os, "pwrite") else os.write(fd, text)
        except OSError as exc:                 # a full disk: the lock holds all the same, only the name is missing
            log.debug("could not write the holder into %s (%s)", fd, exc)

    def release(self) -> None:
        """Unlink the lock file (while still holding it: see the module docstring), then unlock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with _held_guard:
            _held.discard(self._key)
        try:
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path)
        except OSError as exc:                 # a read-only or vanished folder: the lock file stays, unlocked
            log.debug("lock file %s not removed (%s)", self.path, exc)
        finally:
            os.close(fd)                       # closing the file drops the kernel's lock

    @property
    def held(self) -> bool:
        return self._fd is not None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0) if hasattr(os, "pread") else b""
    except OSError:
        text = b""
    text = text.decode("utf-8", "replace").strip()
    return "".join(c for c in text if c.isprintable())[:120] or "another process"
