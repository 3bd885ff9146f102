"""Cyclic garbage is collected by the GUI thread while a window lives (app/gc_guard.py)."""
import gc
import threading

import gradviz.app  # noqa: E402,F401  (PySide6 workaround first)


class _Cycle:
    def __init__(self):
        self.me = self


def test_collection_moves_to_the_gui_thread_and_back(qtbot):
    from gradviz.app.gc_guard import GuiThreadCollector

    was = gc.isenabled()
    first, second = GuiThreadCollector(), GuiThreadCollector()
    first.start()
    second.start()
    assert not gc.isenabled()                       # no thread collects on its own now
    first.stop()
    assert not gc.isenabled()                       # the other window still holds it
    collected_in = []

    class Watched(_Cycle):
        def __del__(self):
            collected_in.append(threading.current_thread() is threading.main_thread())

    def make_garbage():                             # enough cycles to pass the gen-0 threshold
        for _ in range(800):
            Watched()

    worker = threading.Thread(target=make_garbage)
    worker.start()
    worker.join()
    assert collected_in == []                       # the worker's allocations collected nothing
    qtbot.waitUntil(lambda: len(collected_in) == 800, timeout=5000)      # (at most MAX_WAIT_S)
    assert all(collected_in)                        # collected by the GUI thread's timer
    assert sum(second.collections) >= 1
    second.stop()
    assert gc.isenabled() == was


def test_the_window_holds_the_guard_until_shutdown(qtbot):
    from gradviz.app.main_window import MainWindow

    was = gc.isenabled()
    win = MainWindow(extensions=False)
    qtbot.addWidget(win)
    assert not gc.isenabled()
    win.shutdown()
    win.shutdown()                                  # twice is fine
    assert gc.isenabled() == was


def test_the_gui_thread_collector_waits_while_a_trace_asks_for_a_pause(qtbot):
    import weakref

    from gradviz.app.gc_guard import GuiThreadCollector
    from gradviz.core.runtime.gc_pause import gc_paused

    collector = GuiThreadCollector()
    collector.start()
    try:
        gc.collect()
        with gc_paused():
            probe = _Cycle()
            ref = weakref.ref(probe)
            del probe
            for _ in range(2000):     # past the gen-0 threshold
                _Cycle()
            before = list(collector.collections)
            collector.check()
            assert collector.collections == before and ref() is not None   # nothing collected
        collector.check()                               # the pause over: the timer's next tick collects
        assert sum(collector.collections) > sum(before) and ref() is None
    finally:
        collector.stop()
