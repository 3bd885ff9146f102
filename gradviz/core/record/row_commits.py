"""The watch's buffered step rows and their commits: drained to the writer in one numpy pass, committed in
one transaction, retried after a failure, and committed by the background thread when no ``w.step`` comes.

A mixin of ``Watch`` (``recorder.py``), which owns the state it reads: ``_rows`` (a deque of rows),
``_columns``, ``_writer``, ``_last_flush``, ``commit_seconds``, ``_closed`` and ``path``.
"""
from __future__ import annotations

import itertools
import logging
import time

from gradviz.core.record.rows import store_rows
from gradviz.core.record.schema import RecordError

log = logging.getLogger("gradviz.core.record.recorder")


class RowCommits:
    def _flush(self) -> None:
        """Convert the buffered rows (one numpy pass) and commit them in one transaction."""
        self._writer.commit()            # calls _drain first

    def _drain(self) -> None:
        """Hand the buffered rows to the writer (converted in one numpy pass), without committing.

        Rows leave the deque only once the writer has them: an interrupt in the conversion
        keeps them (handed twice, a row is written once: its step is the primary key)."""
        self._last_flush = time.monotonic()
        rows = self._rows
        n = len(rows)                                     # rows appended meanwhile wait for the next commit
        if n:
            store_rows(self._writer, list(itertools.islice(rows, n)), self._columns)
            for _ in range(n):
                rows.popleft()

    def _held_rows(self) -> int:
        return len(self._rows) + self._writer.held_rows

    def _retry_failed_commit(self) -> None:
        """A commit failed (here or in the background): try again; raise while it still fails."""
        try:
            self._flush()
        except RecordError:
            pass                                          # (the writer's failure says why)
        if self._writer.failure is not None:
            raise self._failure_error("this step was not recorded")

    def _failure_error(self, this_step: str) -> RecordError:
        """The writer's failure, with what the file holds and what waits in memory."""
        failure = self._writer.failure
        done = self._writer.committed_step
        upto = f"the steps up to {done}" if done is not None else "no step"
        return RecordError(f"{failure.message}; the file holds {upto}, {self._held_rows()} later step(s) are held "
                           f"in memory, {this_step} (each w.step retries the commit; close() gives up)", self.path)

    def commit_stalled(self) -> None:
        """The background thread's call: commit rows that waited ``commit_seconds`` for a ``w.step``."""
        if self._closed or not self._rows or time.monotonic() - self._last_flush < self.commit_seconds:
            return
        try:
            self._writer.commit()
        except RecordError:                   # kept as the writer's failure: the next w.step raises it
            log.debug("gradviz.watch: background commit of %s failed", self.path, exc_info=True)
