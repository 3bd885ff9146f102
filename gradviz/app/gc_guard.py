"""Cyclic garbage is collected in the GUI thread only, while a window lives.

Python's collector runs in whichever thread happens to allocate when a threshold is
crossed, and it then destroys every unreachable cycle, Qt objects of closed windows and
dialogs included. A Qt object destroyed from the trace or training thread while the GUI
thread paints can crash the process (seen: a segfault in the trace worker, about once in
30 runs of ``tests/test_app.py``, always after earlier windows had closed). So while a
window lives, automatic collection is off and a timer in the GUI thread collects
instead, by the same generation thresholds Python would use (the usual PyQt remedy).

Turning automatic collection off is a process-wide change: it is the ``gui-thread-gc``
patch of ``gradviz/core/runtime/process_patches.py`` (why, install, uninstall), installed when the
first window starts its collector and undone when the last one stops.
"""
from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

from gradviz.core.runtime.gc_pause import pause_requested
from gradviz.core.runtime.process_patches import GC_IN_GUI_THREAD

__all__ = ["GuiThreadCollector"]

INTERVAL_MS = 250
MAX_WAIT_S = 2.0
FULL_EVERY_S = 60.0      # a full collection stalls the window (~150 ms with torch loaded)
# while a trace asks for a pause (core/runtime/gc_pause.py), only this many net allocations make the timer collect
PAUSED_CEILING = 200_000


class GuiThreadCollector(QObject):
    """``start()`` turns automatic collection off and collects from a GUI-thread timer;
    ``stop()`` hands collection back to Python when no other window holds it."""

    _holders = 0

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._active = False
        self._timer = QTimer(self)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(self.check)
        self.collections = [0, 0, 0]          # per generation, for tests and curiosity
        self._last = self._last_full = time.monotonic()

    def start(self) -> None:
        if self._active:
            return
        self._active = True
        cls = GuiThreadCollector
        if cls._holders == 0:
            GC_IN_GUI_THREAD.apply()
        cls._holders += 1
        self._timer.start()

    def stop(self) -> None:
        if not self._active:
            return
        self._active = False
        self._timer.stop()
        cls = GuiThreadCollector
        cls._holders -= 1
        if cls._holders == 0:
            GC_IN_GUI_THREAD.undo()

    def check(self) -> None:
        """Collect the oldest generation whose count passed its threshold (as Python does),
        and the youngest at least every ``MAX_WAIT_S``: the counts are net of frees, so a
        few cycles of garbage could otherwise wait for a long time (cheap: milliseconds)."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        if pause_requested() and counts[0] < PAUSED_CEILING:
            return      # a trace's objects all stay alive: scanning them only slows it (as gradviz export does)
        now = time.monotonic()
        # Python too defers full collections (its long-lived ratio rule): here, to once a minute
        oldest = 2 if now - self._last_full >= FULL_EVERY_S else 1
        for gen in range(oldest, -1, -1):
            if thresholds[gen] and counts[gen] > thresholds[gen]:
                break
        else:
            if now - self._last < MAX_WAIT_S:
                return
            gen = 0
        gc.collect(gen)
        self.collections[gen] += 1
        self._last = now
        if gen == 2:
            self._last_full = now
