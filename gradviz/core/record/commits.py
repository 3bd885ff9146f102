"""Commits of rows a stalled training loop left buffered (``watch``'s background thread).

A watch commits from ``w.step`` (every ``commit_seconds``); when no ``w.step`` comes -- an
evaluation, a slow data loader, a debugger stop -- this thread commits the rows waiting for
longer than ``commit_seconds`` (``Watch.commit_stalled``), so a process killed during the
pause loses nothing it recorded. It never issues a collective (distributed runs reduce in
``w.step``).
"""
from __future__ import annotations

import threading
import weakref

__all__ = ["BackgroundCommits", "BACKGROUND_COMMITS"]


class BackgroundCommits:
    """One daemon thread for every open watch of the process: commits what a stalled loop
    (no ``w.step`` for ``commit_seconds``) left buffered. It runs only while watches are open."""

    def __init__(self) -> None:
        self._watches: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, w) -> None:
        with self._lock:
            self._watches.add(w)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gradviz-watch-commits", daemon=True)
                self._thread.start()

    def discard(self, w) -> None:
        with self._lock:
            self._watches.discard(w)

    def _run(self) -> None:
        while True:
            with self._lock:
                watches = list(self._watches)
                if not watches:
                    self._thread = None
                    return
            interval = min(60.0, min(w.commit_seconds for w in watches) / 2)   # a finite wait, always
            for w in watches:
                w.commit_stalled()
            del watches, w                  # hold no watch while sleeping (weak set)
            self._wake.wait(max(0.05, interval))


BACKGROUND_COMMITS = BackgroundCommits()
