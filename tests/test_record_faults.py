"""Run files through faults: a loop that stalls and is killed, readers that must not write."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from gradviz.core.record import open_run
from gradviz.core.record.loading import summarize

ROOT = Path(__file__).resolve().parent.parent

LOOP = textwrap.dedent("""
    import sys, time, torch
    from torch import nn
    import gradviz
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = gradviz.watch(model, sys.argv[1], every=5, optimizer=opt)
    for step in range({steps}):
        opt.zero_grad()
        loss = model(torch.randn(16, 4)).pow(2).mean()
        loss.backward()
        w.step(loss)
        opt.step()
    print("stalling", flush=True)      # an evaluation, a stalled data loader: no w.step for a while
    time.sleep({sleep})
    {after}
""")


def _start(path: Path, steps: int, sleep: float, after: str = "") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", GRADVIZ_NATIVE="0")
    code = LOOP.format(steps=steps, sleep=sleep, after=after)
    return subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, stdout=subprocess.PIPE, text=True)


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _files(path: Path) -> dict[str, str | None]:
    """Hashes of the run file and its WAL (SQLite's shared-memory index -shm holds read locks)."""
    return {p.name: _digest(p) for p in (path, Path(f"{path}-wal"))}


def test_a_stalled_loop_killed_keeps_every_step(tmp_path):
    """40 steps, then no w.step (a long evaluation), SIGKILL during the pause: all 40 steps
    were committed by the background commit, and read back as recorded."""
    path = tmp_path / "killed.gvrun"
    proc = _start(path, steps=40, sleep=60)
    try:
        assert proc.stdout.readline().strip() == "stalling"
        time.sleep(2.0)                                   # > commit_seconds (0.5) plus slack on a busy machine
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    with open_run(path) as r:
        s = r.steps()
        assert s["step"].tolist() == list(range(40))
        assert r.meta["status"] == "running"          # never closed
        assert np.isfinite(s["loss"]).all() and np.isfinite(s["grad_norms"]).all()
        assert r.node_steps() == list(range(0, 40, 5))


def test_interpreter_exit_commits_without_close(tmp_path):
    path = tmp_path / "exit.gvrun"
    proc = _start(path, steps=7, sleep=0)           # no close(), no with-block: the process just ends
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    with open_run(path) as r:
        assert r.steps()["step"].tolist() == list(range(7))


def test_readers_never_modify_a_run_being_written_or_left_unclean(tmp_path):
    """runs show, the app's reader and follow mode read with RunReader: the run file (and its
    WAL) keep their bytes, whether the writer is alive, was killed, or closed cleanly."""
    path = tmp_path / "live.gvrun"
    proc = _start(path, steps=25, sleep=60)
    try:
        assert proc.stdout.readline().strip() == "stalling"
        time.sleep(1.5)                                   # the background commit has run
        before = _files(path)
        assert before[path.name] and before[f"{path.name}-wal"]        # a live WAL-mode writer
        with open_run(path) as r:
            assert len(r.steps()["step"]) == 25 and r.graph_at(20) is not None
        _cli_show(path)
        assert _files(path) == before
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    unclean = _files(path)
    for _ in range(2):                                    # reading twice: still nothing written
        with open_run(path) as r:
            assert len(r.steps()["step"]) == 25
        _cli_show(path)
        assert _files(path) == unclean
    assert Path(f"{path}-wal").exists()                   # not checkpointed away by a reader


def test_a_cleanly_closed_run_is_read_without_files_beside_it(tmp_path):
    path = tmp_path / "closed.gvrun"
    proc = _start(path, steps=5, sleep=0, after="w.close()")
    proc.communicate(timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["closed.gvrun"]    # one self-contained file
    before = _digest(path)
    with open_run(path) as r:
        assert r.meta["status"] == "closed" and len(r.steps()["step"]) == 5
        summarize([r])
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["closed.gvrun"]


def _cli_show(path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path), "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_closed_wal_mode_run_is_read_as_immutable(tmp_path):
    """A run closed while still in WAL mode (an older gradviz, or a reader held it at close):
    no writer has it open, so it is read immutable and nothing appears beside it."""
    import sqlite3

    path = tmp_path / "wal.gvrun"
    proc = _start(path, steps=4, sleep=0, after="w.close()")
    proc.communicate(timeout=120)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    conn.close()                                          # the last connection: the WAL is folded in and deleted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.gvrun"]
    before = _digest(path)
    with open_run(path) as r:
        assert len(r.steps()["step"]) == 4
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.gvrun"]
