"""Hostile scripts that need a real process: hangs (--timeout), Ctrl-C, writes to file descriptor 1, chdir.

Each runs ``python -m gradviz`` as a user would and checks the exit status, that stdout holds
only gradviz's output (one JSON object with --json), and that the one message names the
``file:line`` where the script was.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONTRACT = '''
import torch
from torch import nn
model = lambda: nn.Linear(4, 2)
def loss_fn(out, target):
    return out.pow(2).mean()
'''


def script(folder: Path, name: str, body: str) -> tuple[Path, int]:
    """``body`` + the rest of the contract; returns the path and the line marked ``# HERE``."""
    text = textwrap.dedent(body) + CONTRACT
    path = folder / name
    path.write_text(text)
    marked = [i for i, line in enumerate(text.splitlines(), 1) if "# HERE" in line]
    return path, (marked[0] if marked else 0)


def gradviz(*argv, cwd: Path, timeout: float = 240) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0"}
    return subprocess.Popen([sys.executable, "-m", "gradviz", *map(str, argv)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


HANG = '''
import time
def batch(step):
    open("in_batch", "w").close()
    while True:
        time.sleep(0.05)  # HERE
'''


def test_timeout_names_the_line_the_script_hung_at(tmp_path):
    path, line = script(tmp_path, "hang.py", HANG)
    start = time.monotonic()
    status, out, err = finish(gradviz("check", path, "--json", "--timeout", "3", cwd=tmp_path))
    assert status == 2 and time.monotonic() - start < 120
    doc = json.loads(out)
    assert doc["ok"] is False and doc["code"] == "timeout" and doc["location"] == f"{path}:{line}"
    assert err.strip() == f"gradviz check: timed out after 3 s (--timeout); the script was at {path}:{line} (in batch)"


def test_timeout_on_export_gradcheck_and_train_too(tmp_path):
    """--timeout is on every command that runs the script (check above); the three run side by side."""
    path, line = script(tmp_path, "hang.py", HANG)
    argv = {"export": ["-o", tmp_path / "g.json"], "gradcheck": [], "train": ["--steps", "3"]}
    # 10 s: the hang must be reached first (train builds its optimizer before the first batch; 2 busy cores)
    procs = {name: gradviz(name, path, *rest, "--timeout", "10", cwd=tmp_path) for name, rest in argv.items()}
    for name, proc in procs.items():
        status, out, err = finish(proc)
        assert status == 2 and "Traceback" not in err, (name, err)
        assert f"gradviz {name}: timed out after 10 s (--timeout); the script was at {path}:{line} (in batch)" in err
    assert not (tmp_path / "g.json").exists()


def test_a_script_that_swallows_the_timeout_is_ended_by_the_watchdog(tmp_path):
    path, line = script(tmp_path, "stubborn.py", '''
        import time
        def batch(step):
            while True:
                try:
                    time.sleep(0.05)  # HERE
                except BaseException:
                    pass
    ''')
    status, out, err = finish(gradviz("export", path, "-o", "g.json", "--timeout", "1", cwd=tmp_path))
    assert status == 2 and out == "" and "Traceback" not in err
    assert f"timed out after 1 s (--timeout); the script was at {path}:" in err
    assert not (tmp_path / "g.json").exists()


def test_ctrl_c_names_the_line_and_exits_130(tmp_path):
    path, line = script(tmp_path, "hang.py", HANG)
    proc = gradviz("train", path, "--steps", "5", cwd=tmp_path)
    deadline = time.monotonic() + 180
    while not (tmp_path / "in_batch").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    status, out, err = finish(proc)
    assert status == 130 and "Traceback" not in err
    assert f"interrupted (Ctrl-C); the script was at {path}:{line} (in batch)" in err


def test_the_scripts_stdout_goes_to_stderr_and_json_stays_one_object(tmp_path):
    path, _ = script(tmp_path, "chatty.py", '''
        import os
        print("print at import")
        os.write(1, b"raw write to fd 1\\n")
        os.system("echo from a shell")
        def batch(step):
            print("print in batch")
            return __import__("torch").randn(3, 4), None
    ''')
    status, out, err = finish(gradviz("check", path, "--json", "--no-gradcheck", cwd=tmp_path))
    assert status == 0, err
    assert json.loads(out)["ok"] is True                     # exactly one JSON object, nothing else
    for said in ("print at import", "raw write to fd 1", "from a shell", "print in batch"):
        assert said in err
    status, out, err = finish(gradviz("train", path, "--steps", "3", "--every", "1", "--json", cwd=tmp_path))
    rows = [json.loads(line) for line in out.splitlines()]   # JSON lines and nothing else
    assert status == 0 and len(rows) == 4 and rows[-1]["summary"] is True and "print in batch" in err


def test_relative_output_is_resolved_before_the_script_changes_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path, _ = script(tmp_path, "mover.py", f'''
        import os
        os.chdir({str(elsewhere)!r})
        def batch(step):
            return __import__("torch").randn(3, 4), None
    ''')
    status, out, err = finish(gradviz("export", "mover.py", "-o", "rel.json", cwd=tmp_path))
    assert status == 0, err
    assert (tmp_path / "rel.json").is_file() and not (elsewhere / "rel.json").exists()
    assert out.startswith(f"wrote {tmp_path / 'rel.json'} ")
