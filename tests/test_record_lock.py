"""One writer per run path (issue #24, part B): a second ``watch`` on a live run is refused and
never unlinks the first one's files; a killed writer's lock dies with it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from gradviz.core.record import RecordError, open_run, watch

ROOT = Path(__file__).resolve().parent.parent

WRITER = textwrap.dedent("""
    import sys, torch
    from torch import nn
    import gradviz
    model = nn.Linear(3, 2)
    w = gradviz.watch(model, sys.argv[1], every=0, commit_every=1)
    for i in range(int(sys.argv[2])):
        model.zero_grad(); model(torch.randn(4, 3)).sum().backward(); w.step(float(i))
    print("recording", flush=True)
    sys.stdin.readline()                      # hold the run open until told
    for i in range(int(sys.argv[2]), 2 * int(sys.argv[2])):
        model.zero_grad(); model(torch.randn(4, 3)).sum().backward(); w.step(float(i))
    w.close()
    print("closed", flush=True)
""")


def _writer(path: Path, steps: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", GRADVIZ_NATIVE="0")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(steps)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "recording"
    return proc


def _steps(model, w, n):
    for _ in range(n):
        model.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        w.step(1.0)


def test_a_second_watch_of_another_process_is_refused_and_unlinks_nothing(tmp_path):
    """The issue's case: B's watch on A's live path unlinked A's files and A recorded into
    nothing. Now B is refused, naming A, and A's run ends with every one of A's steps."""
    path = tmp_path / "same.gvrun"
    a = _writer(path, 20)
    try:
        before = {p.name: p.stat().st_ino for p in tmp_path.iterdir()}
        with pytest.raises(RecordError, match=rf"pid {a.pid} on .*refusing to replace it"):
            watch(nn.Linear(3, 2), path)
        assert {p.name: p.stat().st_ino for p in tmp_path.iterdir()} == before     # nothing unlinked
        a.stdin.write("go\n")
        a.stdin.flush()
        assert a.stdout.readline().strip() == "closed"
    finally:
        a.kill()
        a.wait(30)
    with open_run(path) as r:
        assert r.steps()["loss"].tolist() == [float(i) for i in range(40)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.gvrun"]       # the lock file left with A


def test_a_killed_writers_lock_dies_with_it(tmp_path):
    path = tmp_path / "killed.gvrun"
    a = _writer(path, 5)
    a.send_signal(signal.SIGKILL)
    a.wait(30)
    assert Path(f"{path}-lock").exists()        # left behind, but nobody holds it
    model = nn.Linear(3, 2)
    with watch(model, path, every=0) as w:      # takes the run over (overwrite=True)
        _steps(model, w, 3)
    with open_run(path) as r:
        assert r.n_steps() == 3
    assert not Path(f"{path}-lock").exists()


def test_a_second_watch_in_the_same_process_is_refused_until_the_first_closes(tmp_path):
    """(A notebook cell run twice while the first watch is still open.)"""
    path = tmp_path / "nb.gvrun"
    model = nn.Linear(3, 2)
    first = watch(model, path, every=0)
    _steps(model, first, 4)
    with pytest.raises(RecordError, match="another watch of this process"):
        watch(model, path, every=0)
    _steps(model, first, 4)                     # the first records on, into its own file
    first.close()
    with open_run(path) as r:
        assert r.n_steps() == 8
    with watch(model, path, every=0) as second:
        _steps(model, second, 2)
    with open_run(path) as r:
        assert r.n_steps() == 2


def test_overwrite_false_and_foreign_files_are_refused_without_taking_the_lock_for_good(tmp_path):
    path = tmp_path / "kept.gvrun"
    model = nn.Linear(3, 2)
    with watch(model, path, every=0) as w:
        _steps(model, w, 2)
    with pytest.raises(RecordError, match="overwrite=True"):
        watch(model, path, overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.gvrun"]
    with watch(model, path, every=0) as w:      # the refused attempt left no lock held
        _steps(model, w, 1)


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink"])
def test_a_path_that_is_not_a_regular_file_is_never_touched(tmp_path, kind):
    """A FIFO would block, a socket or device (``/dev/null`` as root!) would be unlinked."""
    import socket

    path = tmp_path / "odd.gvrun"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    else:
        (tmp_path / "target.gvrun").write_text("a user's file")
        path.symlink_to(tmp_path / "target.gvrun")
    with pytest.raises(RecordError, match="not a regular file|symbolic link"):
        watch(nn.Linear(3, 2), path)
    assert os.path.lexists(path)
    assert not Path(f"{path}-lock").exists()
    if kind == "symlink":
        assert (tmp_path / "target.gvrun").read_text() == "a user's file"


def test_dev_null_is_refused_and_stays(tmp_path):
    before = os.stat("/dev/null")
    with pytest.raises(RecordError):
        watch(nn.Linear(3, 2), "/dev/null")
    after = os.stat("/dev/null")
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
