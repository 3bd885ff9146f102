"""The cycle collector is paused while a trace runs, and left as it was."""
from __future__ import annotations

import gc
from pathlib import Path

import gradviz
import threading

from gradviz.core.runtime.gc_pause import GC_HELD_WHILE_STARTING, GC_PAUSED, gc_paused, hold_while_starting, pause_requested, started
from gradviz.core.runtime.process_patches import PATCHES

SCRIPTS = Path(__file__).parent / "scripts"


def test_paused_inside_and_restored_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled() and GC_PAUSED.installed
    assert gc.isenabled() and not GC_PAUSED.installed
    assert PATCHES["gc-paused-for-a-command"] is GC_PAUSED


def test_restored_when_the_body_raises_and_untouched_when_already_off():
    try:
        with gc_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()
    gc.disable()     # someone else (the window's GUI-thread collector) owns it
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled() and not GC_PAUSED.installed
    finally:
        gc.enable()


def test_a_trace_leaves_the_collector_on():
    seen = []
    gradviz.trace(SCRIPTS / "tiny_linear.py")
    seen.append(gc.isenabled())
    assert seen == [True]


def test_start_up_hold_freezes_what_exists_and_turns_collection_back_on():
    assert gc.isenabled()
    before = gc.get_freeze_count()
    hold_while_starting()
    try:
        assert not gc.isenabled() and GC_HELD_WHILE_STARTING.installed
        kept = [object() for _ in range(10)], {"a": [1]}
        started()
        assert gc.isenabled() and not GC_HELD_WHILE_STARTING.installed
        assert gc.get_freeze_count() > before and kept
        probe = [object()]                            # made after start-up
        started()                                     # a second end of start-up freezes nothing
        assert gc.isenabled() and any(o is probe for o in gc.get_objects())   # (frozen ones are not listed)
    finally:
        gc.unfreeze()
        gc.enable()
    assert PATCHES["gc-held-while-starting"] is GC_HELD_WHILE_STARTING


def test_without_a_hold_started_does_nothing_and_a_hold_on_a_disabled_collector_is_not_taken():
    before = gc.get_freeze_count()
    started()
    assert gc.isenabled() and gc.get_freeze_count() == before
    gc.disable()       # someone else owns collection
    try:
        hold_while_starting()
        assert not GC_HELD_WHILE_STARTING.installed
        started()
        assert not gc.isenabled() and gc.get_freeze_count() == before
    finally:
        gc.enable()


def test_a_pause_ends_the_start_up_hold_first():
    before = gc.get_freeze_count()
    hold_while_starting()
    try:
        with gc_paused():
            assert not gc.isenabled() and GC_PAUSED.installed and not GC_HELD_WHILE_STARTING.installed
            assert gc.get_freeze_count() > before
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_pause_requested_while_any_thread_is_inside_a_pause():
    assert not pause_requested()
    inside, leave = threading.Event(), threading.Event()

    def worker():
        with gc_paused():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert inside.wait(5)
        assert pause_requested()
        gc.disable()                     # the window's case: already off, the request still counts
        with gc_paused():
            assert pause_requested()
        gc.enable()
    finally:
        leave.set()
        t.join()
    assert not pause_requested()
