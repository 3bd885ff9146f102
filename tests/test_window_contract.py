"""The window's declared contract: the interfaces panels get, one background-job helper,
one document per opened script, and no part probing the window with getattr/hasattr."""
from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest


from test_app_support import MLP, ROOT, TRANSFORMER, open_and_wait  # noqa: E402

APP = ROOT / "gradviz" / "app"


def test_the_main_window_offers_every_interface(qtbot, tmp_path):
    from PySide6.QtCore import QSettings

    from gradviz.app.contract import PanelHost, RunsHost, TrainingHost
    from gradviz.app.main_window import MainWindow

    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), extensions=True)
    qtbot.addWidget(win)
    try:
        for protocol in (PanelHost, TrainingHost, RunsHost):
            assert isinstance(win, protocol), protocol.__name__
        # every extension is installed by __init__ and kept in a declared attribute
        assert win.extensions == ["training", "diagnosis", "runs", "attribution", "failing_forward",
                                 "compare", "open_model"]
        assert not win.extension_errors and list(win.extension_parts) == win.extensions
        assert win.training_panel is not None and win.run_panel is not None
        assert set(win.diagnosis_panels) >= {"diagnosis", "gradcheck"}
    finally:
        win.shutdown()


def _probes(path: Path) -> list[str]:
    """getattr/hasattr calls on a window or host object in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            target = ast.unparse(node.args[0]) if node.args else ""
            if any(word in target for word in ("window", "host", "win")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_part_probes_the_window():
    probes = [p for f in sorted(APP.rglob("*.py")) for p in _probes(f)]
    assert probes == []


def test_no_module_of_the_window_is_over_400_lines():
    long = {str(f.relative_to(ROOT)): n for f in APP.rglob("*.py") if (n := len(f.read_text().splitlines())) > 400}
    assert long == {}


def test_jobs_supersede_cancel_and_stay_in_their_document(qtbot):
    from gradviz.app.document import Document
    from gradviz.app.jobs import Cancelled, CancelToken, Jobs

    current = {"doc": Document("a.py")}
    jobs = Jobs(is_current=lambda d: d is current["doc"])
    try:
        got, ended = [], []
        release = threading.Event()

        def slow(ctx):
            release.wait(5)
            ctx.check()                      # cancelled meanwhile: raises Cancelled
            return "slow"

        first = jobs.submit("lane", slow, on_done=got.append, on_ended=ended.append)
        second = jobs.submit("lane", lambda ctx: "fast", on_done=got.append, on_ended=ended.append)
        assert first.superseded and first.token.is_set() and not second.superseded
        release.set()
        qtbot.waitUntil(lambda: not second.active, timeout=5000)
        assert got == ["fast"] and ended == ["done"]          # nothing of the superseded job arrives
        assert first.outcome == "cancelled"
        # a job of a document that is no longer current delivers nothing
        doc = current["doc"]
        late = jobs.submit("other", lambda ctx: (release.wait(0.2), "late")[1], document=doc, on_done=got.append)
        current["doc"] = Document("b.py")
        qtbot.waitUntil(lambda: not late.active, timeout=5000)
        assert got == ["fast"]
        # one cancellation type: callable and Event at once (what check and gradcheck poll)
        token = CancelToken()
        assert token() is False and not token.is_set()
        token.set()
        assert token() is True and issubclass(Cancelled, Exception)
        # a failure arrives with its traceback
        failures = []
        job = jobs.submit("lane", lambda ctx: 1 / 0, on_failed=lambda e, tb: failures.append((e, tb)))
        qtbot.waitUntil(lambda: not job.active, timeout=5000)
        assert isinstance(failures[0][0], ZeroDivisionError) and "ZeroDivisionError" in failures[0][1]
    finally:
        assert jobs.stop(5000)


def test_a_new_document_replaces_everything_and_mutes_the_old(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    old = window.document
    window.select_nodes(["param:fc1.weight"])
    old.mark_edges([("param:fc1.weight", "op:1")])
    old.set_norms({"param:fc1.weight": 123.0})
    old.set_loss(9.5, step=40)
    assert window.selected == "param:fc1.weight"
    open_and_wait(qtbot, window, TRANSFORMER)
    new = window.document
    assert new is not old and new.serial > old.serial and new.path == TRANSFORMER.resolve()
    assert new.norms == {} and new.marked_edges == {} and new.live_loss is None and new.selected == ""
    assert not window.scene.marks().edges.get("broken")
    # a stale reference to the old document can change nothing on screen
    before = list(window.scene.norms)
    old.select(["loss"])
    old.set_norms({n: 1e9 for n in new.graph})          # ids the new graph has too
    assert window.selected == "" and window.inspector.node_id == ""
    assert window.scene.norms == before and new.norms == {}


def test_the_gc_guard_is_a_registered_process_patch(qtbot, window):
    import gc

    from gradviz.core.runtime.process_patches import PATCHES

    patch = PATCHES["gui-thread-gc"]
    assert patch.installed and not gc.isenabled() and "GUI thread" in patch.why


def test_jobs_after_the_window_is_gone_are_dropped_quietly(qtbot):
    """A job that outlives its window (stop() timed out) ends without raising in its thread, and a
    job submitted after stop() never runs (seen under torch 2.15: 'Signal source has been deleted'
    raised in a lane thread, reported in whichever test ran next)."""
    import shiboken6

    from gradviz.app.jobs import Jobs

    jobs = Jobs()
    started, release, ran = threading.Event(), threading.Event(), []
    slow = jobs.submit("lane", lambda ctx: (started.set(), release.wait(10), ran.append("slow"))[1])
    assert started.wait(5)
    assert not jobs.stop(50)                        # still running: the window goes anyway
    thread = next(iter(jobs._lanes.values()))[0]
    late = jobs.submit("other", lambda ctx: ran.append("late"))
    assert late.token.is_set() and not late.active and "other" not in jobs._lanes
    shiboken6.delete(jobs)                          # the window (and its Jobs) deleted
    release.set()
    qtbot.waitUntil(thread.isFinished, timeout=10_000)
    qtbot.wait(50)
    assert ran == ["slow"] and slow.token.is_set()  # it ran to its end; nothing raised, nothing delivered
