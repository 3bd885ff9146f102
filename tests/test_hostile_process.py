"""What a user's script may do to its own process, and gradviz still keeps its promises (issue #24: 8, 13).

Before: ``os.fork()`` at import printed two JSON objects and did the work twice; ``os._exit(7)`` in
``loss_fn`` was a silent exit 7 with an empty ``--json``; a non-daemon thread or a sleeping ``atexit``
handler kept ``gradviz export ... --timeout 5`` from ever exiting. The process entry now runs the command
in a worker it supervises (``cli/supervisor.py``); each case runs ``python -m gradviz`` as a user would.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_script import TINY

ROOT = Path(__file__).resolve().parent.parent


def _script(folder: Path, name: str, before: str = "", replace: tuple[str, str] | None = None) -> Path:
    text = before + TINY
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    (folder / name).write_text(text)
    return folder / name


def gradviz(folder: Path, *argv, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0", "GRADVIZ_CACHE": str(folder / "cache")}
    return subprocess.run([sys.executable, "-m", "gradviz", *map(str, argv)], cwd=folder, env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_a_fork_at_import_does_the_work_once(tmp_path):
    _script(tmp_path, "f.py", "import os\nos.fork()\n")
    proc = gradviz(tmp_path, "check", "f.py", "--json", "--no-gradcheck")
    doc = json.loads(proc.stdout)                     # exactly one object: json.loads refuses two
    assert proc.returncode == 0 and doc["ok"] is True
    proc = gradviz(tmp_path, "export", "f.py", "-o", "g.json")
    assert proc.returncode == 0 and proc.stdout.count("wrote ") == 1, proc.stdout
    assert json.loads((tmp_path / "g.json").read_text())["nodes"]


def test_a_fork_in_batch_trains_once(tmp_path):
    _script(tmp_path, "f.py", replace=("def batch(step):\n", "def batch(step):\n    import os\n"
                                                           "    if step == 1:\n        os.fork()\n"))
    proc = gradviz(tmp_path, "train", "f.py", "--steps", "3", "--every", "1", "--json")
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 0 and [r.get("step") for r in rows[:-1]] == [1, 2, 3] and rows[-1]["summary"]


def test_os_exit_in_loss_fn_is_named_not_silent(tmp_path):
    path = _script(tmp_path, "e.py", replace=("def loss_fn(out, y):\n", "def loss_fn(out, y):\n"
                                                                        "    import os\n    os._exit(7)\n"))
    proc = gradviz(tmp_path, "check", "e.py", "--json", "--no-gradcheck")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 2 and doc["ok"] is False and doc["code"] == "process-exit"
    line = proc.stderr.strip()
    assert "\n" not in line and "exit status 7" in line and f"loss_fn (defined at {path}:" in line


def test_a_crash_in_native_code_is_named(tmp_path):
    _script(tmp_path, "c.py", replace=("def batch(step):\n", "def batch(step):\n    import ctypes\n"
                                                            "    ctypes.string_at(0)\n"))
    proc = gradviz(tmp_path, "train", "c.py", "--steps", "2")
    assert proc.returncode == 2 and "SIGSEGV" in proc.stderr and "batch(0) (defined at" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("leftover", ["import threading, time\nthreading.Thread(target=time.sleep, args=(3600,)).start()\n",
                                      "import atexit, time\natexit.register(time.sleep, 3600)\n"],
                         ids=["non-daemon thread", "sleeping atexit handler"])
def test_the_command_exits_when_its_work_is_done(tmp_path, leftover):
    _script(tmp_path, "t.py", leftover)
    start = time.monotonic()
    proc = gradviz(tmp_path, "-v", "export", "t.py", "-o", "g.json", "--timeout", "30", timeout=120)
    assert proc.returncode == 0 and time.monotonic() - start < 100     # before: never
    assert json.loads((tmp_path / "g.json").read_text())["nodes"] and proc.stdout.startswith("wrote ")
    assert "was still running" in proc.stderr and "ended it" in proc.stderr      # --verbose says so


def test_timeout_bounds_a_worker_that_cannot_run_at_all(tmp_path):
    """The script stops its own process (SIGSTOP): neither SIGALRM's handler nor the worker's watchdog can
    run; the supervisor ends the worker once the timeout and the watchdog's grace are past."""
    _script(tmp_path, "a.py", replace=("def batch(step):\n", "def batch(step):\n    import os, signal\n"
                                                            "    os.kill(os.getpid(), signal.SIGSTOP)\n"))
    start = time.monotonic()
    proc = gradviz(tmp_path, "check", "a.py", "--timeout", "2", "--json", "--no-gradcheck", timeout=150)
    assert proc.returncode == 2 and time.monotonic() - start < 120
    doc = json.loads(proc.stdout)
    assert doc["ok"] is False and "timed out after 2 s" in doc["error"] and "batch(0) (defined at" in doc["error"]


def test_the_worker_ends_with_its_supervisor(tmp_path):
    _script(tmp_path, "slow.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0", "GRADVIZ_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "gradviz", "train", "slow.py", "--steps", "100000000"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()                           # training has started: the worker exists
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    worker = int(children.read_text().split()[0])
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Path(f"/proc/{worker}").exists() \
            and "Z" not in Path(f"/proc/{worker}/stat").read_text().split()[2]:
        time.sleep(0.2)
    alive = Path(f"/proc/{worker}").exists() and "Z" not in Path(f"/proc/{worker}/stat").read_text().split()[2]
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive
