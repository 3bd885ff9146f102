"""Python's cycle collector paused while a one-shot command traces, lays out and draws.

A trace allocates hundreds of thousands of small objects (graph attribute dicts, lists of
shapes, Qt items) that stay alive; the generational collector re-scans them every few
hundred allocations, a third of a 5,500-node trace's CPU time (measured: 1.30 -> 0.90 s) and
more as graphs grow. ``gc_paused()`` turns automatic collection off for the duration and
back on after (registered in ``core/runtime/process_patches.py``). It does nothing where automatic
collection is already off (the window collects in its GUI thread: ``app/gc_guard.py``); there it
raises ``pause_requested()``, which that thread's collector honours.

gradviz's own start-up is held the same way. Importing torch, Qt and networkx makes about a
million objects, and Python fully re-scanned them three times on the way (0.2 s of a 4 s
window start on GPT-200). ``hold_while_starting()`` (the ``gradviz`` process's entry only)
turns collection off; ``started()`` freezes what exists by then (``gc.freeze()``: modules,
classes and functions that live as long as the process) and turns it back on, so later
collections scan only what came after. It is called at the first of: the window being built,
a ``gc_paused()`` block, the user's script loading (user code never runs held), the command
returning.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

from gradviz.core.runtime.process_patches import ProcessPatch, register


def _off() -> None:
    gc.disable()


def _on() -> None:
    gc.enable()


GC_PAUSED = register(ProcessPatch(
    name="gc-paused-for-a-command",
    why="the cycle collector re-scans the trace's hundreds of thousands of live objects every few hundred "
        "allocations: about a third of the CPU of `gradviz export` on a 5,500-node graph",
    install=_off,
    uninstall=_on,
))


_state = {"pauses": 0}
_lock = threading.Lock()


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic cycle collection off inside, as it was after (a no-op when it is off already,
    apart from ``pause_requested()``, which the window's GUI-thread collector honours)."""
    started()
    with _lock:
        _state["pauses"] += 1
    try:
        if not gc.isenabled():
            yield
            return
        applied = GC_PAUSED.apply()
        try:
            yield
        finally:
            if applied:
                GC_PAUSED.undo()
    finally:
        with _lock:
            _state["pauses"] -= 1


def pause_requested() -> bool:
    """A ``gc_paused()`` body is running in some thread (a trace in the window's worker)."""
    return _state["pauses"] > 0


def _freeze_and_on() -> None:
    gc.freeze()      # what start-up made lives as long as the process: never scanned again
    gc.enable()


GC_HELD_WHILE_STARTING = register(ProcessPatch(
    name="gc-held-while-starting",
    why="importing torch, Qt and networkx makes about a million objects, which the collector fully "
        "re-scans three times on the way: 0.2 s of the window's start on a 200-block GPT",
    install=_off,
    uninstall=_freeze_and_on,
))


def hold_while_starting() -> None:
    """Collection off until ``started()``: for the ``gradviz`` process's entry, never a library call."""
    if gc.isenabled():
        GC_HELD_WHILE_STARTING.apply()


def started() -> None:
    """End of gradviz's own start-up: freeze what exists and turn collection back on (if held)."""
    with _lock:
        GC_HELD_WHILE_STARTING.undo()
