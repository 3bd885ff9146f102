"""The cycle collector is paused while a trace runs, and left as it was."""
from __future__ import annotations

import gc
from pathlib import Path

import gradviz
from gradviz.core.gc_pause import GC_PAUSED, gc_paused
from gradviz.core.process_patches import PATCHES

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
