"""Reading run files never hangs or crashes (issue #24, part B): FIFOs, devices, sockets, a killed
run on a read-only mount, a copy without its ``-wal``, wrongly typed values, norms near the float limit.

Every bad file is exit 2 with one line from ``gradviz runs show`` / ``runs diff``, never a hang,
never exit 1 ("bug in gradviz").
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.core.record import RecordError, open_run, watch
from gradviz.core.record.loading import summarize
from gradviz.core.record.schema import APPLICATION_ID, DDL, SCHEMA_VERSION
from small_disk import read_only_view

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "gradviz", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


class _InProcess:
    def __init__(self, returncode, out, err):
        self.returncode, self.stdout, self.stderr = returncode, out, err


def _run(capsys, *args: str) -> _InProcess:
    """``gradviz ARGS`` in this process (the same guard and exit statuses, no interpreter start)."""
    from gradviz.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    got = capsys.readouterr()
    return _InProcess(code, got.out, got.err)


def _refused(proc, says: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def _good_run(path: Path, steps: int = 10) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    with watch(model, path, every=2) as w:
        for i in range(steps):
            model.zero_grad()
            loss = model(torch.randn(3, 4)).pow(2).mean()
            loss.backward()
            w.step(loss)
    return path


@pytest.mark.parametrize("kind", ["fifo", "device", "socket"])
def test_runs_show_and_diff_on_a_file_that_is_not_regular_exit_2_at_once(tmp_path, kind):
    """A FIFO blocked ``runs show`` forever: it must be refused before it is opened."""
    if kind == "fifo":
        path = tmp_path / "f.gvrun"
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "s.gvrun"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    good = _good_run(tmp_path / "good.gvrun")
    _refused(_cli("runs", "show", str(path), timeout=60), "not a regular file")
    _refused(_cli("runs", "diff", str(good), str(path), timeout=60), "not a regular file")


KILLED = textwrap.dedent("""
    import os, sys, torch
    from torch import nn
    import gradviz
    model = nn.Linear(3, 2)
    w = gradviz.watch(model, sys.argv[1], every=2, commit_every=1)
    for i in range(12):
        model.zero_grad(); model(torch.randn(4, 3)).sum().backward(); w.step(float(i))
    os.kill(os.getpid(), 9)
""")


def _killed_run(path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GRADVIZ_NATIVE="0")
    proc = subprocess.run([sys.executable, "-c", KILLED, str(path)], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert Path(f"{path}-wal").exists()


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("shm", [True, False])
def test_a_killed_run_on_a_read_only_mount_is_read(tmp_path, shm):
    """'unable to open database file' before, when the -shm was missing: SQLite cannot build
    its WAL index on a read-only file system. The reader reads a private copy instead."""
    src = tmp_path / "src"
    src.mkdir()
    _killed_run(src / "k.gvrun")
    Path(f"{src / 'k.gvrun'}-lock").unlink()
    if not shm:
        Path(f"{src / 'k.gvrun'}-shm").unlink()
    before = _digests(src)
    with read_only_view(src, tmp_path / "ro") as ro:
        with open_run(ro / "k.gvrun") as r:
            assert r.steps()["loss"].tolist() == [float(i) for i in range(12)]
            assert bool(r.notes) == (not shm)
        proc = _cli("runs", "show", str(ro / "k.gvrun"), "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["ranks"][0]["steps"] == 12
    assert _digests(src) == before


def _wal_only_tables(path: Path) -> sqlite3.Connection:
    """A run as a killed older writer leaves it: identity in the main file, tables only in the WAL."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    for stmt in DDL.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    return conn


def test_a_run_copied_without_its_wal_says_so(tmp_path, capsys):
    live = tmp_path / "live.gvrun"
    conn = _wal_only_tables(live)
    copy = tmp_path / "copy.gvrun"
    shutil.copyfile(live, copy)                     # the main file only, as `cp live.gvrun` would
    conn.close()
    _refused(_run(capsys, "runs", "show", str(copy)), "copy.gvrun-wal missing")


def test_a_live_run_copied_without_its_wal_opens_and_says_what_is_missing(tmp_path):
    """This gradviz checkpoints the tables into the main file at once: a copy without the -wal
    opens, and says its later steps are in the -wal it lacks."""
    src = tmp_path / "src"
    src.mkdir()
    _killed_run(src / "k.gvrun")
    shutil.copyfile(src / "k.gvrun", tmp_path / "copy.gvrun")
    with open_run(tmp_path / "copy.gvrun") as r:
        assert any("-wal" in n for n in r.notes)
        info = summarize([r])
    assert info["ranks"][0]["notes"]


@pytest.mark.parametrize("key, value", [
    ("rank", '"3"'), ("rank", "[1]"), ("rank", "-1"), ("world_size", '"x"'), ("world_size", "0"),
    ("created", '"yesterday"'), ("created", "1e300"), ("param_names", "5"), ("param_names", '["a"]'),
    ("param_shapes", '[[-1]]'), ("pid", '{"a": 1}'), ("every", "2.5"), ("status", "7"), ("node", "true"),
    ("model_changes", '[{"step": "x"}]'), ("param_shards", '"sharded"'), ("hostname", "[]"),
])
def test_wrongly_typed_metadata_is_a_corrupted_run_file(tmp_path, capsys, key, value):
    path = _good_run(tmp_path / "m.gvrun")
    conn = sqlite3.connect(path)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="corrupted run file"):
        r = open_run(path)
        summarize([r])
    _refused(_run(capsys, "runs", "show", str(path)), "corrupted run file")


@pytest.mark.parametrize("column, value", [
    ("loss", "'abc'"), ("time", "'noon'"), ("grad_norm", "x'00'"), ("lr", "'fast'"), ("node_sampled", "'yes'"),
    ("grad_norms", "'text'"), ("grad_norms", "x'0000'"), ("update_ratios", "12"),
])
def test_text_in_numeric_columns_is_a_corrupted_run_file(tmp_path, capsys, column, value):
    path = _good_run(tmp_path / "c.gvrun")
    conn = sqlite3.connect(path)
    conn.execute(f"UPDATE steps SET {column} = {value} WHERE step = 3")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="corrupted run file"):
        with open_run(path) as r:
            summarize([r])
    _refused(_run(capsys, "runs", "show", str(path)), "corrupted run file")
    _refused(_run(capsys, "runs", "diff", f"{path}@1", f"{path}@5"), "corrupted run file")


def test_graph_json_of_the_wrong_shape_is_a_corrupted_run_file(tmp_path, capsys):
    path = _good_run(tmp_path / "g.gvrun")
    for graph in ('[1, 2]', '{"nodes": [{"id": 5}], "edges": []}', '{"nodes": [{"id": "a", "module": []}], '
                  '"edges": []}', '{"nodes": [], "edges": [{"source": "a"}]}'):
        conn = sqlite3.connect(path)
        conn.execute("UPDATE graphs SET graph = ?", (graph,))
        conn.commit()
        conn.close()
        with pytest.raises(RecordError, match="corrupted run file"):
            with open_run(path) as r:
                summarize([r])
                r.graph_at(4)
        _refused(_run(capsys, "runs", "diff", f"{path}@2", f"{path}@8"), "corrupted run file")


def test_norms_near_the_float_limit_have_a_finite_median(tmp_path, capsys):
    path = _good_run(tmp_path / "big.gvrun", steps=4)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE steps SET grad_norm = 1e308")
    conn.commit()
    conn.close()
    with open_run(path) as r:
        g = summarize([r])["ranks"][0]["grad_norm"]
    assert g["median"] == 1e308 and g["max"] == 1e308
    proc = _run(capsys, "runs", "show", str(path))
    assert proc.returncode == 0 and "median 1e+308" in proc.stdout, proc.stdout
