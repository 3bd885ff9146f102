"""A sweep of hostile and careless uses of gradviz's files, scripts and command line (issue #24, part A).

    python tests/sweep_hostile_files.py [--gradviz CHECKOUT] [--only SUBSTRING] [--json OUT]

Each case runs ``python -m gradviz ...`` as a user would (in a fresh folder, with its own
``GRADVIZ_CACHE``) against the gradviz in CHECKOUT (default: this one) and is judged:

- **right**: what gradviz promises (exit 0 done, or exit 2 with one line and no traceback);
- **wrong**: a traceback, exit 1 "bug in gradviz", a silently accepted bad value, a message
  that is not one clean line, duplicated output;
- **dangerous**: code from a file ran (a marker file appeared), a hang (the case outlived its
  limit), a user's file was deleted.

It prints one line per case and the counts. Not a test file (pytest does not collect it): the
tests of ``test_hostile_files*.py`` hold each case that matters; this sweep is the census
that compares a checkout before and after (about 4 minutes on two busy cores).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tiny_script import TINY

HERE = Path(__file__).resolve().parent
DEFAULT_LIMIT = 90.0

MODS = '''\
import torch
from torch import nn
def build():
    return nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
def embed():
    return nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(8 * 16, 2))
'''
BIG_EMBEDDING = '''\
import torch
from torch import nn
ROWS = {rows}
model = lambda: nn.Sequential(nn.Embedding(ROWS, 1024), nn.Linear(1024, 2))
def batch(step):
    return torch.randint(0, 100, (2, 3)), None
def loss_fn(out, y):
    return out.sum()
'''
MAKE_RUN = '''\
import sys, torch
from torch import nn
import gradviz
m = nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
with gradviz.watch(m, sys.argv[1], every=2, optimizer=opt) as w:
    for step in range(int(sys.argv[2])):
        opt.zero_grad()
        loss = m(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        w.step(loss)
        opt.step()
'''
EVIL_PT = '''\
import sys, torch
class P:
    def __reduce__(self):
        return (eval, ("open(%r, 'a').write('weights_reduce\\\\n')" % sys.argv[2],))
torch.save({"w": P()}, sys.argv[1])
'''
PICKLED_MODEL = '''\
import sys, torch
torch.save(torch.nn.Linear(4, 2), sys.argv[1])
'''


@dataclass
class Result:
    rc: int | None
    out: str
    err: str
    seconds: float
    hung: bool
    folder: Path


@dataclass
class Case:
    name: str
    argv: list[str] | Callable[[Path], list[str]]
    judge: Callable[[Result], tuple[str, str]]
    setup: Callable[[Path], None] = lambda folder: None
    env: dict[str, str] | Callable[[Path], dict[str, str]] = field(default_factory=dict)
    pipe: str | None = None          # "close": stdout's reader gone at once; "one": one line read, then gone
    limit: float = DEFAULT_LIMIT
    group: str = ""
    cwd: Path | None = None          # default: the case's own fresh folder


# -- judges --------------------------------------------------------------------------------------

def _clean_lines(err: str) -> list[str]:
    """stderr's lines, without gradviz's note of what it invented for a model with no script."""
    return [line for line in err.splitlines() if line.strip() and ": invented input" not in line]


def _message_problem(err: str) -> str | None:
    if "Traceback" in err:
        return "a traceback"
    if "\x1b" in err or re.search(r"[\x00-\x08\x0b-\x1f\x7f]", err.replace("\r\n", "\n")):
        return "control characters in the message"
    if any(len(line) > 4000 for line in err.splitlines()):
        return "a message longer than 4000 characters"
    return None


def usage_error(r: Result, lines: int = 1) -> tuple[str, str]:
    """Exit 2 with one line (the value refused), no traceback."""
    if r.rc != 2:
        return "wrong", f"exit {r.rc} (want 2): {_tail(r.err)}"
    problem = _message_problem(r.err)
    if problem:
        return "wrong", problem
    got = _clean_lines(r.err)
    if len(got) > lines:
        return "wrong", f"{len(got)} lines on stderr: {_tail(r.err)}"
    return "right", _tail(r.err)


def script_error(r: Result) -> tuple[str, str]:
    """Exit 2, a message without traceback (a model note line before it is fine)."""
    return usage_error(r, lines=3)


def succeeds(r: Result) -> tuple[str, str]:
    if r.rc != 0:
        return "wrong", f"exit {r.rc} (want 0): {_tail(r.err)}"
    problem = _message_problem(r.err)
    return ("wrong", problem) if problem else ("right", _tail(r.out))


def quiet_pipe(r: Result) -> tuple[str, str]:
    """stdout closed under it: no traceback, nothing but the user's own lines on stderr, no 'internal error'."""
    if "Traceback" in r.err or "internal error" in r.err or "BrokenPipe" in r.err or "Exception ignored" in r.err:
        return "wrong", f"exit {r.rc}: {_tail(r.err)}"
    if r.rc not in (0, 1, 141, -signal.SIGPIPE):
        return "wrong", f"exit {r.rc}: {_tail(r.err)}"
    return "right", f"exit {r.rc}"


def one_json(r: Result) -> tuple[str, str]:
    """stdout holds exactly one JSON object."""
    text = r.out.strip()
    try:
        json.loads(text)
    except ValueError:
        n = text.count('"findings"')
        return "wrong", f"stdout is not one JSON object ({n} objects?, {len(text)} chars), exit {r.rc}"
    return "right", f"exit {r.rc}"


def all_of(*judges) -> Callable[[Result], tuple[str, str]]:
    def judge(r: Result) -> tuple[str, str]:
        notes = []
        for j in judges:
            verdict, note = j(r)
            if verdict != "right":
                return verdict, note
            notes.append(note)
        return "right", "; ".join(n for n in notes if n)[:160]
    return judge


def exits_with_message(r: Result) -> tuple[str, str]:
    """The script ended the process: gradviz still says so (exit 2, a message), and --json has its object."""
    if r.rc != 2 or not _clean_lines(r.err):
        return "wrong", f"exit {r.rc}, stderr {_tail(r.err)!r}, stdout {len(r.out)} chars"
    problem = _message_problem(r.err)
    if problem:
        return "wrong", problem
    if "--json" in r.out or r.out.strip():
        try:
            json.loads(r.out)
        except ValueError:
            return "wrong", "stdout is not one JSON object"
    return "right", _tail(r.err)


def timed(limit: float, judge) -> Callable[[Result], tuple[str, str]]:
    def inner(r: Result) -> tuple[str, str]:
        if r.seconds > limit:
            return "wrong", f"took {r.seconds:.0f} s (more than {limit:g})"
        return judge(r)
    return inner


def _tail(text: str) -> str:
    lines = _clean_lines(text)
    return (lines[-1][:150] if lines else "")


# -- the cases -----------------------------------------------------------------------------------

def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def tiny(folder: Path, name: str = "tiny.py", extra: str = "") -> Path:
    return write(folder, name, textwrap.dedent(extra) + TINY)


def cases(shared: Path, python: str) -> list[Case]:
    evil = json.loads((shared / "pt2" / "manifest.json").read_text())["cases"] if (shared / "pt2").is_dir() else {}
    out: list[Case] = []

    def add(name, argv, judge, **kw):
        if kw.get("group") == "pt2":
            kw["cwd"] = shared / "pt2"   # the payloads' marker paths are relative to it; gv_evil_mod is there
        out.append(Case(name, argv, judge, **kw))

    # ---- code from a file: .pt2 archives (marker must never appear) ------------------------------
    for case, info in evil.items():
        archive = shared / "pt2" / info["file"]
        trap = info["trap"] or ""
        if trap.startswith("broken"):
            add(f"pt2 {case}: check", ["check", str(archive), "--no-gradcheck"], script_error, group="pt2")
            continue
        if case.startswith("clean") or case.startswith("old_clean") or case.startswith("old_dyn"):
            add(f"pt2 {case}: check", ["check", str(archive), "--no-gradcheck"],
                lambda r: ("right", "") if r.rc in (0, 1) and "Traceback" not in r.err else
                ("wrong", f"exit {r.rc}: {_tail(r.err)}"), group="pt2")
            continue
        # a file name is harmless data, and an AOTInductor .so is never opened: both load (no marker)
        harmless = trap == "file name" or trap.startswith("native")
        want = succeeds if harmless else script_error
        add(f"pt2 {case}: check", ["check", str(archive), "--no-gradcheck"],
            (lambda r: ("right", "") if r.rc in (0, 1) and "Traceback" not in r.err else
             ("wrong", f"exit {r.rc}: {_tail(r.err)}")) if harmless else want,
            group="pt2")
        if case in ("sample_inputs", "old_sample_inputs", "weight_pickle", "sympy_expr", "op_target"):
            add(f"pt2 {case}: export", ["export", str(archive), "-o", "g.json"], script_error, group="pt2")

    # ---- code from a file: generated scripts ---------------------------------------------------
    def weights_inject(folder: Path) -> list[str]:
        tiny(folder)
        name = 'x";__import__("pathlib").Path("m_inject").touch();".pt'
        (folder / name).write_bytes(b"")
        return ["check", "tiny.py", "--weights", name, "--no-gradcheck"]
    add("--weights name with a quote and code", weights_inject, lambda r: file_absent(r, "m_inject", script_error),
        group="generated")

    def weights_newline(folder: Path) -> list[str]:
        tiny(folder)
        import_torch_save(python, folder / "w.pt", folder)
        os.rename(folder / "w.pt", folder / "w\nx.pt")
        return ["check", "tiny.py", "--weights", "w\nx.pt", "--no-gradcheck"]
    add("--weights name with a newline", weights_newline, succeeds_or_fits, group="generated")

    def weights_backslash_n(folder: Path) -> list[str]:
        tiny(folder)
        import_torch_save(python, folder / "w.pt", folder)
        os.rename(folder / "w.pt", folder / "w\\N{x}.pt")
        return ["check", "tiny.py", "--weights", "w\\N{x}.pt", "--no-gradcheck"]
    add("--weights name with \\N", weights_backslash_n, succeeds_or_fits, group="generated")

    def callable_quote(folder: Path) -> list[str]:
        write(folder, "mods.py", MODS)
        return ["check", "mods:build", "--input", "2,8", "--no-gradcheck"]
    add("a callable with --input (control)", callable_quote, succeeds_or_fits, group="generated")

    def tampered_cache(folder: Path) -> list[str]:
        write(folder, "mods.py", MODS)
        env = {**os.environ, "PYTHONPATH": os.environ["SWEEP_GRADVIZ"], "GRADVIZ_CACHE": str(folder / "cache"),
               "GRADVIZ_NATIVE": "0"}
        subprocess.run([python, "-m", "gradviz", "check", "mods:build", "--input", "2,8", "--no-gradcheck"],
                       cwd=folder, env=env, capture_output=True, timeout=120)
        for generated in (folder / "cache" / "models").glob("*.py"):
            generated.write_text('open("m_cache", "w").close()\n' + generated.read_text())
        return ["check", "mods:build", "--input", "2,8", "--no-gradcheck"]
    add("a cached generated script edited by someone", tampered_cache,
        lambda r: file_absent(r, "m_cache", succeeds_or_fits), group="generated",
        env=lambda folder: {"GRADVIZ_CACHE": str(folder / "cache")})

    def evil_weights(folder: Path) -> list[str]:
        tiny(folder)
        subprocess.run([python, "-c", EVIL_PT, str(folder / "evil.pt"), str(folder / "m_weights")], check=True,
                       capture_output=True)
        return ["check", "tiny.py", "--weights", "evil.pt", "--no-gradcheck"]
    add("--weights with a __reduce__ payload (held)", evil_weights,
        lambda r: file_absent(r, "m_weights", script_error), group="generated")

    def pickled_model(folder: Path) -> list[str]:
        tiny(folder)
        subprocess.run([python, "-c", PICKLED_MODEL, str(folder / "model.pth")], check=True, capture_output=True)
        return ["check", "model.pth"]
    add("a pickled whole model given as the model (held)", pickled_model, script_error, group="generated")

    # ---- hangs: special files ---------------------------------------------------------------
    def fifo(name: str):
        def make(folder: Path) -> None:
            os.mkfifo(folder / name)
            tiny(folder)
        return make
    add("script is a FIFO", ["check", "s.py"], script_error, setup=fifo("s.py"), group="hang", limit=40)
    add(".pt2 is a FIFO", ["check", "p.pt2"], script_error, setup=fifo("p.pt2"), group="hang", limit=40)
    add("--weights is a FIFO", ["check", "tiny.py", "--weights", "w.pt"], script_error, setup=fifo("w.pt"),
        group="hang", limit=40)
    add("--weights FIFO .safetensors", ["check", "tiny.py", "--weights", "w.safetensors"], script_error,
        setup=fifo("w.safetensors"), group="hang", limit=40)
    add("--baseline is a FIFO", ["attribute", "tiny.py", "--baseline", "b.npy"], script_error,
        setup=fifo("b.npy"), group="hang", limit=40)
    add("weights given as the model is a FIFO", ["check", "w.pt"], script_error, setup=fifo("w.pt"),
        group="hang", limit=40)
    add("script is /dev/zero", ["check", "/dev/zero"], script_error, group="hang", limit=40)
    add("--weights /dev/zero", ["check", "tiny.py", "--weights", "/dev/zero"], script_error,
        setup=lambda f: tiny(f), group="hang", limit=40)
    add("script is a directory", ["check", "adir"], script_error, setup=lambda f: (f / "adir").mkdir(),
        group="hang")
    add(".pt2 is a directory", ["check", "d.pt2"], script_error, setup=lambda f: (f / "d.pt2").mkdir(),
        group="hang")

    def sock(folder: Path) -> list[str]:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(folder / "s.py"))
        return ["check", "s.py"]
    add("script is a socket", sock, script_error, group="hang", limit=40)

    thread = '''
        import threading, time
        threading.Thread(target=lambda: time.sleep(3600)).start()
    '''
    atexit_ = '''
        import atexit, time
        atexit.register(time.sleep, 3600)
    '''
    add("non-daemon thread: export --timeout 5", ["export", "t.py", "-o", "g.json", "--timeout", "5"],
        timed(40, succeeds), setup=lambda f: tiny(f, "t.py", thread), group="hang", limit=60)
    add("sleeping atexit: export --timeout 5", ["export", "t.py", "-o", "g.json", "--timeout", "5"],
        timed(40, succeeds), setup=lambda f: tiny(f, "t.py", atexit_), group="hang", limit=60)
    add("non-daemon thread: check --json", ["check", "t.py", "--json", "--no-gradcheck"],
        timed(40, one_json), setup=lambda f: tiny(f, "t.py", thread), group="hang", limit=60)
    add("sleeping atexit: train", ["train", "t.py", "--steps", "3"], timed(40, succeeds),
        setup=lambda f: tiny(f, "t.py", atexit_), group="hang", limit=60)
    add("non-daemon thread: gradcheck", ["gradcheck", "t.py"], timed(40, succeeds),
        setup=lambda f: tiny(f, "t.py", thread), group="hang", limit=60)
    add("--timeout 2 on a thread-leaving script", ["check", "t.py", "--timeout", "2", "--no-gradcheck"],
        timed(40, lambda r: ("right", "") if r.rc in (0, 2) else ("wrong", f"exit {r.rc}")),
        setup=lambda f: tiny(f, "t.py", thread), group="hang", limit=60)

    # ---- fork and exits inside the script ----------------------------------------------------
    add("os.fork() at import: check --json", ["check", "f.py", "--json", "--no-gradcheck"], one_json,
        setup=lambda f: tiny(f, "f.py", "import os\nos.fork()\n"), group="fork")

    def forked_once(r: Result) -> tuple[str, str]:
        lines = [line for line in r.out.splitlines() if line.startswith("wrote ")]
        return ("right", "") if len(lines) == 1 and r.rc == 0 else ("wrong", f"{len(lines)} 'wrote' lines, exit {r.rc}")
    add("os.fork() at import: export", ["export", "f.py", "-o", "g.json"], forked_once,
        setup=lambda f: tiny(f, "f.py", "import os\nos.fork()\n"), group="fork")
    add("os.fork() in batch: train --json", ["train", "f.py", "--steps", "2", "--json"],
        lambda r: ("right", "") if r.out.count('"summary"') == 1 else ("wrong", f"{r.out.count(chr(34) + 'summary')} summaries"),
        setup=lambda f: write(f, "f.py", TINY.replace("def batch(step):\n", "def batch(step):\n    import os\n    if step == 0: os.fork()\n")),
        group="fork")
    loss_exit = TINY.replace("def loss_fn(out, y):\n", "def loss_fn(out, y):\n    import os\n    os._exit(7)\n")
    add("os._exit(7) in loss_fn: check --json", ["check", "e.py", "--json", "--no-gradcheck"], exits_with_message,
        setup=lambda f: write(f, "e.py", loss_exit), group="fork")
    batch_exit = TINY.replace("def batch(step):\n", "def batch(step):\n    import os\n    os._exit(0)\n")
    add("os._exit(0) in batch: export", ["export", "e.py", "-o", "g.json"], exits_with_message,
        setup=lambda f: write(f, "e.py", batch_exit), group="fork")
    crash = TINY.replace("def loss_fn(out, y):\n", "def loss_fn(out, y):\n    import ctypes\n    ctypes.string_at(0)\n")
    add("segfault in loss_fn: check --json", ["check", "c.py", "--json", "--no-gradcheck"], exits_with_message,
        setup=lambda f: write(f, "c.py", crash), group="fork")
    killself = TINY.replace("def batch(step):\n", "def batch(step):\n    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    add("SIGKILL to itself in batch: train", ["train", "k.py", "--steps", "2"], exits_with_message,
        setup=lambda f: write(f, "k.py", killself), group="fork")
    add("os.close(1) at import: check --json", ["check", "c1.py", "--json", "--no-gradcheck"], one_json,
        setup=lambda f: tiny(f, "c1.py", "import os\nos.close(1)\n"), group="fork")
    add("sys.stdout = None at import: check --json", ["check", "n.py", "--json", "--no-gradcheck"], one_json,
        setup=lambda f: tiny(f, "n.py", "import sys\nsys.stdout = None\n"), group="fork")
    add("SIGALRM ignored, --timeout 3", ["check", "a.py", "--timeout", "3", "--no-gradcheck"],
        timed(45, usage_error),
        setup=lambda f: write(f, "a.py", "import signal, time\n" + TINY.replace(
            "def batch(step):\n", "def batch(step):\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    time.sleep(3600)\n")),
        group="fork", limit=70)

    # ---- every argument validated ------------------------------------------------------------
    bad = [
        ("train --clip -1", ["train", "tiny.py", "--clip", "-1", "--steps", "2"]),
        ("train --clip 0", ["train", "tiny.py", "--clip", "0", "--steps", "2"]),
        ("train --clip nan", ["train", "tiny.py", "--clip", "nan", "--steps", "2"]),
        ("train --clip inf", ["train", "tiny.py", "--clip", "inf", "--steps", "2"]),
        ("train --steps 0", ["train", "tiny.py", "--steps", "0"]),
        ("train --steps -5", ["train", "tiny.py", "--steps", "-5"]),
        ("train --every 0", ["train", "tiny.py", "--steps", "2", "--every", "0"]),
        ("train --accum 0", ["train", "tiny.py", "--steps", "2", "--accum", "0"]),
        ("train --lr -1", ["train", "tiny.py", "--steps", "2", "--lr", "-1"]),
        ("train --lr nan", ["train", "tiny.py", "--steps", "2", "--lr", "nan"]),
        ("train --agc -1", ["train", "tiny.py", "--steps", "2", "--agc", "-1"]),
        ("train --agc-eps nan", ["train", "tiny.py", "--steps", "2", "--agc", "0.1", "--agc-eps", "nan"]),
        ("train --label-smoothing 2", ["train", "tiny.py", "--steps", "2", "--label-smoothing", "2"]),
        ("train --label-smoothing nan", ["train", "tiny.py", "--steps", "2", "--label-smoothing", "nan"]),
        ("check --steps 0", ["check", "tiny.py", "--steps", "0"]),
        ("check --steps -3", ["check", "tiny.py", "--steps", "-3"]),
        ("export --collapse -3", ["export", "tiny.py", "-o", "g.json", "--collapse", "-3"]),
        ("export --collapse nan", ["export", "tiny.py", "-o", "g.json", "--collapse", "nan"]),
        ("export --dpi -5", ["export", "tiny.py", "-o", "g.svg", "--dpi", "-5"]),
        ("export --dpi nan", ["export", "tiny.py", "-o", "g.svg", "--dpi", "nan"]),
        ("export --scale nan", ["export", "tiny.py", "-o", "g.png", "--scale", "nan"]),
        ("export --scale inf", ["export", "tiny.py", "-o", "g.png", "--scale", "inf"]),
        ("export --scale 1e300", ["export", "tiny.py", "-o", "g.png", "--scale", "1e300"]),
        ("export --max-pixels 1e-9", ["export", "tiny.py", "-o", "g.png", "--max-pixels", "1e-9"]),
        ("export --max-pixels nan", ["export", "tiny.py", "-o", "g.png", "--max-pixels", "nan"]),
        ("export --max-pixels inf", ["export", "tiny.py", "-o", "g.png", "--max-pixels", "inf"]),
        ("export --step -1", ["export", "tiny.py", "-o", "g.json", "--step", "-1"]),
        ("check --timeout inf", ["check", "tiny.py", "--timeout", "inf"]),
        ("check --timeout nan", ["check", "tiny.py", "--timeout", "nan"]),
        ("check --timeout 1e300", ["check", "tiny.py", "--timeout", "1e300"]),
        ("check --timeout 0", ["check", "tiny.py", "--timeout", "0"]),
        ("gradcheck --eps 0", ["gradcheck", "tiny.py", "--eps", "0"]),
        ("gradcheck --eps nan", ["gradcheck", "tiny.py", "--eps", "nan"]),
        ("gradcheck --samples -1", ["gradcheck", "tiny.py", "--samples", "-1"]),
        ("gradcheck --atol nan", ["gradcheck", "tiny.py", "--atol", "nan"]),
        ("gradcheck --rtol -1", ["gradcheck", "tiny.py", "--rtol", "-1"]),
        ("attribute --steps 0", ["attribute", "tiny.py", "--steps", "0"]),
        ("attribute --steps -4", ["attribute", "tiny.py", "--steps", "-4"]),
        ("attribute --example 99999", ["attribute", "tiny.py", "-o", "a.png", "--example", "99999"]),
        ("runs diff --top -1 (missing runs)", ["runs", "diff", "nope.gvrun", "nope2.gvrun", "--top", "-1"]),
        ("an unknown option", ["check", "tiny.py", "--frobnicate"]),
        ("--input 99999999999999999999999,8", ["export", "mods:build", "--input", "99999999999999999999999,8",
                                              "-o", "g.json"]),
        ("--input 0,8", ["export", "mods:build", "--input", "0,8", "-o", "g.json"]),
        ("--input 100000,100000,100000", ["export", "mods:build", "--input", "100000,100000,100000", "-o", "g.json"]),
        ("--input ,", ["export", "mods:build", "--input", ",", "-o", "g.json"]),
        ("--input 2,16:long:0", ["export", "mods:embed", "--input", "2,16:long:0", "-o", "g.json"]),
        ("--input 2,16:long:99999999999999999999999", ["export", "mods:embed", "--input",
                                                       "2,16:long:99999999999999999999999", "-o", "g.json"]),
        ("--loss ce:0", ["export", "mods:build", "--input", "2,8", "--loss", "ce:0", "-o", "g.json"]),
        ("--loss ce:99999999999999999999", ["export", "mods:build", "--input", "2,8", "--loss",
                                            "ce:99999999999999999999", "-o", "g.json"]),
    ]
    for name, argv in bad:
        add(name, argv, usage_error, setup=lambda f: (tiny(f), write(f, "mods.py", MODS)), group="args")

    long_name = "a" * 5000
    add("a 5,000-character -o path", ["export", "tiny.py", "-o", f"{long_name}.json"], usage_error,
        setup=lambda f: tiny(f), group="args")
    add("a 5,000-character script path", ["check", f"{long_name}.py"], usage_error, group="args")
    add("a 300-character file name", ["check", "b" * 300 + ".py"], usage_error, group="args")
    add("a 5,000-character --weights", ["check", "tiny.py", "--weights", f"{long_name}.pt"], usage_error,
        setup=lambda f: tiny(f), group="args")
    add("a 5,000-character run path", ["runs", "show", f"{long_name}.gvrun"], usage_error, group="args")
    add("GRADVIZ_CACHE=/dev/null", ["check", "mods:build", "--input", "2,8"], usage_error,
        setup=lambda f: write(f, "mods.py", MODS), env={"GRADVIZ_CACHE": "/dev/null"}, group="args")
    add("GRADVIZ_CACHE a regular file", ["check", "mods:build", "--input", "2,8"], usage_error,
        setup=lambda f: (write(f, "mods.py", MODS), write(f, "cachefile", "x")),
        env=lambda f: {"GRADVIZ_CACHE": str(f / "cachefile")}, group="args")

    def read_only_cache(folder: Path) -> None:
        write(folder, "mods.py", MODS)
        (folder / "rocache").mkdir()
        os.chmod(folder / "rocache", 0o555)
    add("GRADVIZ_CACHE read-only", ["check", "mods:build", "--input", "2,8"],
        usage_error if os.geteuid() != 0 else succeeds_or_fits, setup=read_only_cache,
        env=lambda f: {"GRADVIZ_CACHE": str(f / "rocache")}, group="args")
    add("-o into a missing folder", ["export", "tiny.py", "-o", "no/such/g.json"], usage_error,
        setup=lambda f: tiny(f), group="args")
    add("-o /dev/full", ["export", "tiny.py", "-o", "/dev/full"], usage_error, setup=lambda f: tiny(f), group="args")
    add("-o onto the script (held)", ["export", "tiny.py", "-o", "tiny.py"],
        lambda r: ("right", "") if r.rc == 2 and "Traceback" not in r.err and
        "nn.Linear" in (r.folder / "tiny.py").read_text() else ("dangerous", f"exit {r.rc}"),
        setup=lambda f: tiny(f), group="args")
    add("-o with an unknown extension", ["export", "tiny.py", "-o", "g.xyz"], usage_error,
        setup=lambda f: tiny(f), group="args")

    # ---- closed pipes -----------------------------------------------------------------------
    def with_run(folder: Path) -> None:
        subprocess.run([python, "-c", MAKE_RUN, str(folder / "r.gvrun"), "40"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": os.environ["SWEEP_GRADVIZ"], "GRADVIZ_NATIVE": "0"})
        subprocess.run([python, "-c", MAKE_RUN, str(folder / "s.gvrun"), "30"], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": os.environ["SWEEP_GRADVIZ"], "GRADVIZ_NATIVE": "0"})
        tiny(folder)
    for name, argv, pipe in (
            ("runs show | true", ["runs", "show", "r.gvrun"], "close"),
            ("runs show --json | true", ["runs", "show", "r.gvrun", "--json"], "close"),
            ("runs diff | true", ["runs", "diff", "r.gvrun", "s.gvrun"], "close"),
            ("runs diff --json | head -1", ["runs", "diff", "r.gvrun", "s.gvrun", "--json"], "one"),
            ("check | true", ["check", "tiny.py", "--no-gradcheck"], "close"),
            ("check --json | head -1", ["check", "tiny.py", "--json", "--no-gradcheck"], "one"),
            ("train | head -1", ["train", "tiny.py", "--steps", "200", "--every", "1"], "one"),
            ("train --json | true", ["train", "tiny.py", "--steps", "30", "--every", "1", "--json"], "close"),
            ("gradcheck | true", ["gradcheck", "tiny.py"], "close"),
            ("export | true", ["export", "tiny.py", "-o", "g.json"], "close"),
            ("attribute | true", ["attribute", "tiny.py", "--steps", "4"], "close"),
            ("native status | true", ["native", "status"], "close"),
            ("--version | true", ["--version"], "close")):
        add(name, argv, quiet_pipe, setup=with_run, pipe=pipe, group="pipe")

    # ---- messages: broken files, long and escaped text --------------------------------------
    add("an empty .pt2", ["check", "e.pt2"], script_error, setup=lambda f: (f / "e.pt2").write_bytes(b""),
        group="message")
    add("a .pt2 of random bytes", ["export", "r.pt2", "-o", "g.json"], script_error,
        setup=lambda f: (f / "r.pt2").write_bytes(os.urandom(4096)), group="message")
    add("a .pt2 that is a plain zip", ["check", "z.pt2"], script_error, setup=make_zip, group="message")
    add("an empty weights file", ["check", "tiny.py", "--weights", "e.pt"], script_error,
        setup=lambda f: (tiny(f), (f / "e.pt").write_bytes(b"")), group="message")
    add("a weights file of random bytes", ["check", "tiny.py", "--weights", "r.safetensors"], script_error,
        setup=lambda f: (tiny(f), (f / "r.safetensors").write_bytes(os.urandom(300))), group="message")
    add("a lying safetensors header (held)", ["check", "tiny.py", "--weights", "l.safetensors"], script_error,
        setup=lying_safetensors, group="message")
    huge = TINY.replace("def loss_fn(out, y):\n",
                        "def loss_fn(out, y):\n    raise ValueError('\\x1b[31mred\\x1b[0m\\x1b]0;title\\x07' + 'x' * 200000)\n")
    add("a 200 KB exception message with ANSI escapes", ["check", "h.py", "--no-gradcheck"], script_error,
        setup=lambda f: write(f, "h.py", huge), group="message")
    add("a 200 KB exception message, --json", ["check", "h.py", "--json", "--no-gradcheck"],
        all_of(one_json, lambda r: ("right", "") if len(r.out) < 20000 else ("wrong", f"{len(r.out)} chars of JSON")),
        setup=lambda f: write(f, "h.py", huge), group="message")
    multi = TINY.replace("def batch(step):\n", "def batch(step):\n    raise RuntimeError('line one\\nline two\\r\\nline three')\n")
    add("a multi-line exception message", ["check", "m.py", "--no-gradcheck"], usage_error,
        setup=lambda f: write(f, "m.py", multi), group="message")
    badstr = TINY.replace("def batch(step):\n", "def batch(step):\n    class E(Exception):\n        def __str__(self): raise RuntimeError('no')\n    raise E()\n")
    add("an exception whose __str__ raises", ["check", "b.py", "--no-gradcheck"], script_error,
        setup=lambda f: write(f, "b.py", badstr), group="message")
    add("a script with a NUL byte", ["check", "nul.py"], script_error,
        setup=lambda f: (f / "nul.py").write_bytes(b"import torch\x00\n"), group="message")
    add("a script in Latin-1", ["check", "l1.py"], script_error,
        setup=lambda f: (f / "l1.py").write_bytes(b"# caf\xe9\nx = '\xe9'\n"), group="message")
    add("a binary given as the script", ["check", "bin.py"], script_error,
        setup=lambda f: (f / "bin.py").write_bytes(Path(sys.executable).resolve().read_bytes()[:65536]),
        group="message")
    meta_loss = TINY.replace("def loss_fn(out, y):\n    return nn.functional.cross_entropy(out, y)",
                             "def loss_fn(out, y):\n    return torch.zeros((), device='meta', requires_grad=True)")
    add("a meta loss under check", ["check", "ml.py", "--no-gradcheck"],
        lambda r: ("right", "") if r.rc in (1, 2) and "Traceback" not in r.err else ("wrong", f"exit {r.rc}"),
        setup=lambda f: write(f, "ml.py", meta_loss), group="message")
    add("a meta loss under export", ["export", "ml.py", "-o", "g.json"], script_error,
        setup=lambda f: write(f, "ml.py", meta_loss), group="message")
    add("a huge single parameter without --meta (export)", ["export", "big.py", "-o", "g.json"],
        lambda r: ("right", _tail(r.err)) if r.rc == 0 and "meta" in r.err else ("wrong", f"exit {r.rc}: {_tail(r.err)}"),
        setup=lambda f: write(f, "big.py", BIG_EMBEDDING.format(rows=_rows_beyond_memory())), group="message")
    add("a huge single parameter without --meta (check)", ["check", "big.py", "--no-gradcheck"],
        lambda r: ("right", _tail(r.err)) if r.rc in (0, 1) and "meta" in r.err and "Traceback" not in r.err
        else ("wrong", f"exit {r.rc}: {_tail(r.err)}"),
        setup=lambda f: write(f, "big.py", BIG_EMBEDDING.format(rows=_rows_beyond_memory())), group="message")

    # ---- lost files: temporaries that look like gradviz's ------------------------------------
    for name in (".notes.99999-abcdef12.part", ".g.json.99999-abcdef12.part", ".x.1-00000000.part"):
        add(f"a user's file named {name} beside an export", ["export", "tiny.py", "-o", "g.json"],
            lambda r, n=name: ("right", "") if (r.folder / n).exists() else ("dangerous", f"{n} deleted"),
            setup=lambda f, n=name: (tiny(f), (f / n).write_text("my notes")), group="files")
    return out


def _rows_beyond_memory() -> int:
    """Rows of a 1024-wide float32 embedding twice this machine's memory (one parameter)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return int(2 * total // (1024 * 4))


def file_absent(r: Result, name: str, judge) -> tuple[str, str]:
    if (r.folder / name).exists():
        return "dangerous", f"{name} was created: code from a file ran"
    return judge(r)


def succeeds_or_fits(r: Result) -> tuple[str, str]:
    if r.rc in (0, 1) and "Traceback" not in r.err and "internal error" not in r.err:
        return "right", f"exit {r.rc}"
    return "wrong", f"exit {r.rc}: {_tail(r.err)}"


def import_torch_save(python: str, path: Path, folder: Path) -> None:
    code = ("import sys, torch; from torch import nn; torch.manual_seed(0);"
            "m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)); torch.save(m.state_dict(), sys.argv[1])")
    subprocess.run([python, "-c", code, str(path)], check=True, capture_output=True)


def make_zip(folder: Path) -> None:
    import zipfile

    with zipfile.ZipFile(folder / "z.pt2", "w") as z:
        z.writestr("hello.txt", "not a program")


def lying_safetensors(folder: Path) -> None:
    tiny(folder)
    header = json.dumps({"0.weight": {"dtype": "F32", "shape": [8, 4], "data_offsets": [0, 10 ** 12]}}).encode()
    (folder / "l.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 64)


# -- running -----------------------------------------------------------------------------------

def run_case(case: Case, python: str, gradviz: str, base: Path) -> tuple[str, str, float]:
    folder = Path(tempfile.mkdtemp(prefix="case-", dir=base))
    env = {**os.environ, "PYTHONPATH": gradviz, "GRADVIZ_NATIVE": "0", "GRADVIZ_CACHE": str(folder / "cache"),
           "PYTHONWARNINGS": "default"}
    try:
        case.setup(folder)
        argv = case.argv(folder) if callable(case.argv) else case.argv
        env.update(case.env(folder) if callable(case.env) else case.env)
    except Exception as exc:  # noqa: BLE001 - a case that cannot be set up is reported, not hidden
        return "wrong", f"setup failed: {type(exc).__name__}: {exc}", 0.0
    start = time.monotonic()
    read_fd = write_fd = None
    stdout = subprocess.PIPE
    if case.pipe:
        read_fd, write_fd = os.pipe()
        stdout = write_fd
    proc = subprocess.Popen([python, "-m", "gradviz", *argv], cwd=case.cwd or folder, env=env, stdout=stdout,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    if case.pipe:
        os.close(write_fd)
        if case.pipe == "one":
            with os.fdopen(read_fd, "rb", buffering=0) as reader:
                got = b""
                while b"\n" not in got:
                    chunk = reader.read(1)
                    if not chunk:
                        break
                    got += chunk
        else:
            os.close(read_fd)
    hung = False
    try:
        out, err = proc.communicate(timeout=case.limit)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    seconds = time.monotonic() - start
    result = Result(proc.returncode, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"),
                    seconds, hung, folder)
    with_marker = (Path(os.environ["SWEEP_SHARED"]) / "marker")
    if with_marker.exists() and with_marker.read_text().strip():
        ran = with_marker.read_text().split()
        with_marker.write_text("")
        return "dangerous", f"a payload ran: {', '.join(sorted(set(ran)))}", seconds
    if hung:
        return "dangerous", f"hung: still running after {case.limit:g} s", seconds
    verdict, note = case.judge(result)
    return verdict, note, seconds


def prepare_shared(shared: Path, python: str) -> None:
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "marker").write_text("")
    if not (shared / "pt2" / "manifest.json").exists():
        subprocess.run([python, str(HERE / "evil_pt2.py"), str(shared / "pt2"), str(shared / "marker")], check=True,
                       capture_output=True, timeout=600)
    (shared / "marker").write_text("")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradviz", default=str(HERE.parent), help="the checkout to test (its root)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--only", default=None, help="run the cases whose name or group contains this")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--shared", default=None, help="folder for the archives made once (default: a temporary one)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gradviz-sweep-"))
    shared = Path(args.shared) if args.shared else base / "shared"
    os.environ["SWEEP_GRADVIZ"] = str(Path(args.gradviz).resolve())
    os.environ["SWEEP_SHARED"] = str(shared)
    prepare_shared(shared, args.python)
    results = []
    for case in cases(shared, args.python):
        if args.only and args.only not in case.name and args.only != case.group:
            continue
        verdict, note, seconds = run_case(case, args.python, os.environ["SWEEP_GRADVIZ"], base)
        results.append({"case": case.name, "group": case.group, "verdict": verdict, "note": note,
                        "seconds": round(seconds, 1)})
        print(f"{verdict:9} {seconds:5.1f}s  [{case.group}] {case.name}: {note}", flush=True)
    counts = {v: sum(r["verdict"] == v for r in results) for v in ("right", "wrong", "dangerous")}
    print(f"tried {len(results)}: {counts['right']} right, {counts['wrong']} wrong, {counts['dangerous']} dangerous")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
