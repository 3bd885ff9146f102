"""Special files never hang gradviz, and its temporaries are unmistakably its own (issue #24: 7, 17).

Before: a script, ``.pt2``, ``--weights`` or ``--baseline`` that is a FIFO blocked or was "no such file";
a user's own ``.notes.99999-abcdef12.part`` beside an export was deleted (the sweep matched a name pattern).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gradviz.cli.main import main
from gradviz.core.runtime.atomic import AtomicFiles, atomic_write, sweep_stale_parts
from gradviz.core.runtime.paths import PathError, open_regular, require_regular_file

TINY = Path(__file__).parent / "scripts" / "tiny_linear.py"


def _fifo(folder: Path, name: str) -> Path:
    path = folder / name
    os.mkfifo(path)
    return path


def _no_hang(fn, seconds: float = 60):
    """``fn()``'s result, or a failure if it has not returned in ``seconds`` (a blocked open)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            box["error"] = exc
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():       # the daemon thread stays blocked; the test fails now instead of hanging
        pytest.fail("blocked on a special file")
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "folder"])
def test_only_regular_files_are_opened(tmp_path, kind):
    if kind == "fifo":
        path = _fifo(tmp_path, "p")
    elif kind == "socket":
        path = tmp_path / "s"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path = tmp_path / "d"
        path.mkdir()
    words = {"fifo": "a FIFO", "socket": "a socket", "device": "a character device", "folder": "a folder"}[kind]
    with pytest.raises(PathError, match=words):
        require_regular_file(path)
    with pytest.raises((PathError, IsADirectoryError, OSError)):
        _no_hang(lambda: open_regular(path))


@pytest.mark.parametrize("argv", [["check", "{fifo}.py"], ["check", "{fifo}.pt2"],
                                  ["check", str(TINY), "--weights", "{fifo}.pt"],
                                  ["check", str(TINY), "--weights", "{fifo}.safetensors"],
                                  ["attribute", str(TINY), "--baseline", "{fifo}.npy"],
                                  ["check", "{fifo}.pt"], ["export", "{fifo}.py", "-o", "g.json"]],
                         ids=lambda a: " ".join(a)[-40:])
def test_a_fifo_on_the_command_line_is_one_line_not_a_hang(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    name = next(a for a in argv if "{fifo}" in a).replace("{fifo}", "pipe")
    _fifo(tmp_path, name)
    status = _no_hang(lambda: main([a.replace("{fifo}", "pipe") for a in argv]))
    err = capsys.readouterr().err.strip()
    assert status == 2 and "a FIFO (named pipe), not a regular file" in err and len(err.splitlines()) == 1, err


def test_the_api_refuses_a_fifo_too(tmp_path):
    import gradviz
    from gradviz.core.runtime.errors import ScriptError
    from gradviz.core.script.checkpoints import load_program, read_state_dict

    for call, name in ((gradviz.load_script, "s.py"), (load_program, "p.pt2"), (read_state_dict, "w.pt")):
        fifo = _fifo(tmp_path, name)
        with pytest.raises(ScriptError, match="FIFO"):
            _no_hang(lambda: call(fifo))


def test_a_users_file_named_like_a_temporary_is_never_swept(tmp_path):
    """The old sweep removed ``.NAME.<dead pid>-<8 hex>.part`` whatever it was; now only what the registry
    holds, and only while it is the same file (device and inode)."""
    mine = [tmp_path / ".notes.99999-abcdef12.part", tmp_path / ".g.json.4000000-00000000.part"]
    for path in mine:
        path.write_text("my own notes")
    atomic_write(tmp_path / "g.json", lambda tmp: Path(tmp).write_text("{}"))
    assert all(p.read_text() == "my own notes" for p in mine)
    assert sweep_stale_parts(tmp_path) == []


def test_a_killed_writers_temporary_is_swept_but_not_a_file_put_in_its_place(tmp_path):
    code = ("import os, signal, sys; from gradviz.core.runtime.atomic import AtomicFiles; "
            "f = AtomicFiles(); tmp = f.temp_for(sys.argv[1]); open(tmp, 'wb').write(b'half'); "
            "print(tmp, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for replace in (False, True):
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "g.png")], capture_output=True, text=True,
                              env=env)
        left = Path(proc.stdout.strip())
        assert left.exists()
        if replace:                       # the user moved a file of their own to that name: another inode
            (tmp_path / "mine.txt").write_text("mine")
            os.replace(tmp_path / "mine.txt", left)
        swept = sweep_stale_parts(tmp_path)
        assert (swept == [left]) != replace and left.exists() == replace
    assert (tmp_path / left.name).read_text() == "mine"


def test_a_live_writers_temporary_is_kept(tmp_path):
    files = AtomicFiles()
    tmp = files.temp_for(tmp_path / "x.json")
    assert sweep_stale_parts(tmp_path) == [] and os.path.exists(tmp)
    files.discard()
    assert not os.path.exists(tmp)
