"""A sweep of hostile and careless uses of the recorder and the run-file reader (issue #24, part B).

    PYTHONPATH=. python tests/sweeps/record_sweep.py            # this tree
    PYTHONPATH=/path/to/other/checkout python tests/sweeps/record_sweep.py   # another one, to compare

Each case does what a careless or hostile user would and judges the outcome:
``right`` (refused with a clear RecordError/TypeError/ValueError or handled correctly),
``wrong`` (a raw exception, a wrong result, a misleading message, exit 1 "bug in gradviz"),
``dangerous`` (a step lost without a word, a user's file destroyed, a hang). Only public API and
the CLI's ``main`` are used, so the same script judges an older gradviz. Cases that need root (a
small tmpfs, a read-only bind mount, a device node) say "skipped" without it. Every case is
bounded by an alarm (a hang is ``dangerous``); the whole sweep takes about a minute.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import torch
from torch import nn

import gradviz
from gradviz.core.record import RecordError, open_run

CASES: list = []
RIGHT, WRONG, DANGER, SKIP = "right", "wrong", "dangerous", "skipped"


class Hang(Exception):
    pass


def case(fn):
    CASES.append(fn)
    return fn


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))


def train(m, w, steps, loss=None, start=0):
    for i in range(start, start + steps):
        m.zero_grad()
        out = m(torch.randn(3, 4, generator=torch.Generator().manual_seed(i))).pow(2).mean()
        out.backward()
        w.step(out if loss is None else loss)


def good_run(d: Path, name="good.gvrun", steps=8) -> Path:
    m = model()
    p = d / name
    with gradviz.watch(m, p, every=2) as w:
        train(m, w, steps)
    return p


def steps_of(p: Path) -> list[int]:
    with open_run(p) as r:
        return r.steps()["step"].tolist()


def cli(*args) -> tuple[int, str, str]:
    from gradviz.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def refused_cleanly(args, says=None) -> tuple[str, str]:
    code, out, err = cli(*args)
    lines = err.strip().splitlines()
    if code == 2 and len(lines) == 1 and "Traceback" not in err and (says is None or says in err.lower()):
        return RIGHT, lines[0][-110:]
    return WRONG, f"exit {code}: {err.strip()[-160:]}"


def raises(fn, kinds=(RecordError,), says=None) -> tuple[str, str]:
    try:
        fn()
    except kinds as exc:
        if says is None or says in str(exc).lower():
            return RIGHT, f"{type(exc).__name__}: {str(exc)[-100:]}"
        return WRONG, f"{type(exc).__name__} without '{says}': {str(exc)[-100:]}"
    except Hang:
        raise
    except Exception as exc:
        return WRONG, f"raw {type(exc).__name__}: {str(exc)[:100]}"
    return WRONG, "accepted"


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def root_only() -> bool:
    return os.geteuid() == 0


@contextlib.contextmanager
def tmpfs(d: Path, kb: int):
    d.mkdir()
    if not root_only() or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(d)]).returncode:
        raise SkipCase("needs root to mount a tmpfs")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)])


def fill(d: Path) -> None:
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


class SkipCase(Exception):
    pass


# -- writing: where the run goes ------------------------------------------------------------

@case
def watch_over_a_text_file(d):
    p = d / "notes.gvrun"
    p.write_text("my notes")
    verdict = raises(lambda: gradviz.watch(model(), p))
    return (verdict if p.read_text() == "my notes" else (DANGER, "the user's file was overwritten"))


@case
def watch_on_a_fifo(d):
    p = d / "f.gvrun"
    os.mkfifo(p)
    verdict = raises(lambda: gradviz.watch(model(), p), says="regular")
    return verdict if stat.S_ISFIFO(os.lstat(p).st_mode) else (DANGER, "the FIFO was unlinked")


@case
def watch_on_a_socket(d):
    p = d / "s.gvrun"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(p))
    verdict = raises(lambda: gradviz.watch(model(), p), says="regular")
    return verdict if os.path.lexists(p) else (DANGER, "the socket was unlinked")


@case
def watch_on_a_device_node(d):
    if not root_only():
        raise SkipCase("mknod needs root")
    p = d / "null.gvrun"
    os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))       # a /dev/null of our own
    verdict = raises(lambda: gradviz.watch(model(), p), says="regular")
    return verdict if os.path.lexists(p) and stat.S_ISCHR(os.lstat(p).st_mode) else (DANGER, "device unlinked")


@case
def watch_on_a_symlink_to_a_users_file(d):
    (d / "mine.txt").write_text("keep me")
    p = d / "link.gvrun"
    p.symlink_to(d / "mine.txt")
    verdict = raises(lambda: gradviz.watch(model(), p))
    ok = (d / "mine.txt").read_text() == "keep me" and p.is_symlink()
    return verdict if ok else (DANGER, "the link or its file was replaced")


@case
def watch_on_a_directory(d):
    return raises(lambda: gradviz.watch(model(), d), says="directory")


@case
def watch_under_a_file(d):
    (d / "file").write_text("x")
    return raises(lambda: gradviz.watch(model(), d / "file" / "r.gvrun"))


@case
def watch_with_a_300_character_name(d):
    return raises(lambda: gradviz.watch(model(), d / ("x" * 300 + ".gvrun")), says="too long")


@case
def watch_with_a_5000_character_path(d):
    return raises(lambda: gradviz.watch(model(), d / "/".join(["y" * 200] * 25) / "r.gvrun"), says="too long")


@case
def watch_with_a_nul_in_the_path(d):
    return raises(lambda: gradviz.watch(model(), str(d / "a\0b.gvrun")), kinds=(RecordError, ValueError))


@case
def watch_on_a_full_disk_leaves_no_file(d):
    with tmpfs(d / "disk", 64) as disk:
        fill(disk)
        verdict = raises(lambda: gradviz.watch(model(), disk / "r.gvrun"), says="full")
        left = sorted(p.name for p in disk.iterdir())
        if left != ["filler"]:
            return WRONG, f"left {left}"
        return verdict


@case
def watch_in_a_read_only_folder(d):
    if not root_only():
        raise SkipCase("needs root for a read-only bind mount")
    (d / "src").mkdir()
    (d / "ro").mkdir()
    subprocess.run(["mount", "--bind", str(d / "src"), str(d / "ro")], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d / "ro")], check=True)
        return raises(lambda: gradviz.watch(model(), d / "ro" / "r.gvrun"))
    finally:
        subprocess.run(["umount", "-l", str(d / "ro")])


@case
def watch_with_a_newline_and_unicode_in_the_name(d):
    p = d / "ü\nrun ✓.gvrun"
    m = model()
    with gradviz.watch(m, p, every=2) as w:
        train(m, w, 3)
    return (RIGHT, "recorded") if steps_of(p) == [0, 1, 2] else (WRONG, "steps differ")


@case
def watch_with_braces_in_the_path(d):
    m = model()
    try:
        with gradviz.watch(m, d / "exp{lr=0.1}.gvrun", every=0) as w:
            train(m, w, 2)
    except Exception as exc:
        return WRONG, f"raw {type(exc).__name__}: {exc}"
    return (RIGHT, "recorded") if (d / "exp{lr=0.1}.gvrun").exists() else (WRONG, "written elsewhere")


@case
def watch_with_overwrite_false_on_a_run(d):
    p = good_run(d)
    before = digest(p)
    verdict = raises(lambda: gradviz.watch(model(), p, overwrite=False), says="overwrite")
    return verdict if digest(p) == before else (DANGER, "the old run changed")


@case
def watch_over_an_empty_file(d):
    p = d / "empty.gvrun"
    p.write_bytes(b"")
    m = model()
    with gradviz.watch(m, p, every=0) as w:
        train(m, w, 2)
    return (RIGHT, "replaced") if steps_of(p) == [0, 1] else (WRONG, "not recorded")


# -- writing: two writers ---------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys, torch, gradviz
    from torch import nn
    m = nn.Linear(3, 2)
    w = gradviz.watch(m, sys.argv[1], every=0, commit_every=1)
    for i in range(10):
        m.zero_grad(); m(torch.randn(2, 3)).sum().backward(); w.step(float(i))
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(10, 20):
        m.zero_grad(); m(torch.randn(2, 3)).sum().backward(); w.step(float(i))
    w.close()
    print("done", flush=True)
""")


def writer_process(p: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(p)], env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("writer did not start")
    return proc


@case
def a_second_process_watches_a_live_run(d):
    p = d / "same.gvrun"
    a = writer_process(p)
    try:
        m = model()
        try:
            w = gradviz.watch(m, p, every=0)
        except RecordError as exc:
            verdict = (RIGHT, str(exc)[-90:])
        else:
            train(m, w, 3)
            w.close()
            verdict = (WRONG, "accepted")
        a.stdin.write("go\n")
        a.stdin.flush()
        a.stdout.readline()
    finally:
        a.kill()
        a.wait()
    if steps_of(p) != list(range(20)):
        return DANGER, f"the first writer's run ends with {len(steps_of(p))} steps (its files were replaced)"
    return verdict


@case
def a_second_watch_in_the_same_process(d):
    p = d / "nb.gvrun"
    m = model()
    first = gradviz.watch(m, p, every=0)
    train(m, first, 3)
    try:
        second = gradviz.watch(m, p, every=0)
        train(m, second, 2)
        second.close()
        verdict = (WRONG, "accepted")
    except RecordError as exc:
        verdict = (RIGHT, str(exc)[-90:])
    train(m, first, 3, start=3)
    first.close()
    got = steps_of(p)
    return verdict if got == list(range(6)) else (DANGER, f"the first watch's file holds {got}")


@case
def a_killed_writer_does_not_lock_the_path(d):
    p = d / "killed.gvrun"
    a = writer_process(p)
    a.kill()
    a.wait()
    m = model()
    try:
        with gradviz.watch(m, p, every=0) as w:
            train(m, w, 2)
    except RecordError as exc:
        return WRONG, f"still locked: {exc}"
    return (RIGHT, "taken over") if steps_of(p) == [0, 1] else (WRONG, "not recorded")


# -- writing: options and losses ---------------------------------------------------------------

def bad_option(**kw):
    def run(d):
        return raises(lambda: gradviz.watch(model(), d / "o.gvrun", **kw), kinds=(ValueError, TypeError))
    run.__name__ = "option_" + "_".join(f"{k}_{v}" for k, v in kw.items())
    return run


for kw in (dict(every=-1), dict(every="ten"), dict(commit_seconds=float("inf")), dict(commit_seconds=float("nan")),
           dict(commit_seconds=-1.0), dict(update_ratio_every=0)):
    CASES.append(bad_option(**kw))


def bad_loss(value, label):
    def run(d):
        m = model()
        p = d / "loss.gvrun"
        w = gradviz.watch(m, p, every=2)
        train(m, w, 4)
        try:
            train(m, w, 1, loss=value)
        except (TypeError, ValueError, RecordError) as exc:
            verdict = (RIGHT, f"{type(exc).__name__} at that step: {str(exc)[:70]}")
        except Exception as exc:
            verdict = (WRONG, f"raw {type(exc).__name__}")
        else:
            verdict = None
        train(m, w, 2, start=5)
        try:
            w.close()
        except Exception as exc:
            return DANGER, f"accepted, then close() raised {type(exc).__name__}: the run lost its steps"
        got = steps_of(p)
        if got[:4] != [0, 1, 2, 3]:
            return DANGER, f"good steps lost: {got}"
        return verdict or (WRONG, "accepted silently")
    run.__name__ = f"loss_{label}"
    return run


for value, label in (("oops", "string"), ([1.0, 2.0], "list"), (1 + 2j, "complex"), (torch.ones(3), "tensor_of_3"),
                     (torch.tensor(1 + 1j), "complex_tensor"), ({"loss": 1.0}, "dict"), (b"1.0", "bytes")):
    CASES.append(bad_loss(value, label))


def good_loss(value, expect, label):
    def run(d):
        m = model()
        p = d / "gl.gvrun"
        try:
            with gradviz.watch(m, p, every=0) as w:
                train(m, w, 1, loss=value)
        except Exception as exc:
            return WRONG, f"{type(exc).__name__}: {exc}"
        with open_run(p) as r:
            got = r.steps()["loss"][0]
        same = (np.isnan(got) and np.isnan(expect)) or got == expect
        return (RIGHT, f"recorded {got}") if same else (WRONG, f"recorded {got}, expected {expect}")
    run.__name__ = f"loss_{label}_is_recorded"
    return run


for value, expect, label in ((float("nan"), float("nan"), "nan"), (float("inf"), float("inf"), "inf"),
                             (np.float32(0.5), 0.5, "numpy_scalar"), (Decimal("1.5"), 1.5, "decimal"),
                             (10 ** 400, float("inf"), "huge_int"), (torch.tensor([2.0]), 2.0, "one_element")):
    CASES.append(good_loss(value, expect, label))


@case
def step_after_close(d):
    m = model()
    w = gradviz.watch(m, d / "c.gvrun", every=0)
    w.close()
    return raises(lambda: train(m, w, 1), says="closed")


@case
def watch_of_something_not_a_module(d):
    return raises(lambda: gradviz.watch(lambda x: x, d / "x.gvrun"), kinds=(TypeError,))


# -- writing: faults during the run -----------------------------------------------------------------

@case
def disk_fills_under_a_slow_loop(d):
    with tmpfs(d / "disk", 160) as disk:
        m = model()
        w = gradviz.watch(m, disk / "r.gvrun", every=0, commit_seconds=0.2)
        raised_at = error = None
        for i in range(40):
            if i == 4:
                fill(disk)
            try:
                train(m, w, 1, start=i)
            except RecordError as exc:
                raised_at, error = i, str(exc)
                break
            time.sleep(0.15)
        with contextlib.suppress(Exception):
            w.close()
        if raised_at is None:
            return DANGER, "40 steps on a full disk, w.step never raised"
        on_disk = steps_of(disk / "r.gvrun")
        # (writes that need no new block still succeed after the disk filled: those steps are safe)
        # "at once": at most the two steps since the last commit that went through wait in memory
        late = raised_at - (on_disk[-1] if on_disk else -1) - 1
        if on_disk != list(range(len(on_disk))):
            return DANGER, f"steps missing from the file: {on_disk}"
        note = f"raised at step {raised_at}, the file holds 0..{on_disk[-1] if on_disk else '-'}"
        return (RIGHT, note) if late <= 2 else (WRONG, note + f": {late} steps held unreported")


@case
def run_file_removed_mid_run(d):
    m = model()
    p = d / "gone.gvrun"
    w = gradviz.watch(m, p, every=0, commit_every=1)
    train(m, w, 2)
    p.unlink()
    try:
        train(m, w, 5, start=2)
    except RecordError as exc:
        return RIGHT, str(exc)[-80:]
    finally:
        with contextlib.suppress(Exception):
            w.close()
    return DANGER, "5 steps recorded into a removed file, no error"


@case
def run_file_replaced_mid_run(d):
    m = model()
    p = d / "swap.gvrun"
    w = gradviz.watch(m, p, every=0, commit_every=1)
    train(m, w, 2)
    os.replace(good_run(d, "other.gvrun"), p)
    try:
        train(m, w, 5, start=2)
    except RecordError as exc:
        return RIGHT, str(exc)[-80:]
    finally:
        with contextlib.suppress(Exception):
            w.close()
    return DANGER, "recorded into a file no longer at the path, no error"


def interrupt_in(target_module: str, attr: str, label: str):
    def run(d):
        import importlib

        mod = importlib.import_module(target_module)
        real = getattr(mod, attr)
        fired = []

        def once(*a, **k):
            if not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return real(*a, **k)

        m = model()
        p = d / "ki.gvrun"
        w = gradviz.watch(m, p, every=0, commit_every=30, commit_seconds=1000)
        train(m, w, 30)                        # step 0 is committed at once; 1..29 wait for the 30th row
        setattr(mod, attr, once)
        try:
            try:
                train(m, w, 1, start=30)
            except KeyboardInterrupt:
                pass
        finally:
            setattr(mod, attr, real)
        with contextlib.suppress(Exception):
            w.close()
        got = steps_of(p)
        if not fired:
            return WRONG, "the interrupt never fired (the sweep's hook missed)"
        return (RIGHT, f"{len(got)} steps kept") if got[:30] == list(range(30)) else (DANGER, f"kept {len(got)} of 30")
    run.__name__ = f"ctrl_c_in_{label}"
    return run


CASES.append(interrupt_in("gradviz.core.record.recorder", "store_rows", "the_row_store"))
CASES.append(interrupt_in("gradviz.core.record.rows", "step_columns", "the_row_conversion"))
CASES.append(interrupt_in("gradviz.core.record.writer", "_insert_many", "the_commit"))


@case
def interpreter_exit_inside_a_crashing_loop(d):
    p = d / "crash.gvrun"
    code = textwrap.dedent(f"""
        import torch, gradviz
        from torch import nn
        m = nn.Linear(3, 2)
        w = gradviz.watch(m, {str(p)!r}, every=0)
        for i in range(25):
            m.zero_grad(); m(torch.randn(2, 3)).sum().backward(); w.step(float(i))
        raise SystemExit(3)
    """)
    subprocess.run([sys.executable, "-c", code], timeout=120)
    got = steps_of(p)
    return (RIGHT, "all 25 steps") if got == list(range(25)) else (DANGER, f"{len(got)} of 25")


# -- writing: the model changes ----------------------------------------------------------------

def changed_model(change, label):
    def run(d):
        m = model()
        p = d / "mc.gvrun"
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with gradviz.watch(m, p, every=2, optimizer=opt) as w:
            train(m, w, 3)
            change(m)
            m.zero_grad()
            out = m(torch.randn(3, 4)).pow(2).mean()
            out.backward()
            want = {n: q.grad.norm().item() for n, q in m.named_parameters() if q.grad is not None}
            w.step(out)
        with open_run(p) as r:
            s = r.steps()
            names = r.param_names
            said = bool(r.meta.get("model_changes"))
        got = {n: s["grad_norms"][-1][j] for j, n in enumerate(names) if s["has_grad"][-1][j]}
        followed = set(got) == set(want) and all(abs(got[n] - want[n]) <= 1e-5 * max(1, want[n]) for n in want)
        if followed and said:
            return RIGHT, "followed, and the file says so"
        return WRONG, f"followed={followed}, said={said}: the old parameters' norms were recorded"
    run.__name__ = f"model_{label}"
    return run


def _replace(m):
    m[2] = nn.Linear(6, 2)


def _grow(m):
    m.append(nn.Linear(2, 2))


def _shrink(m):
    m[2] = nn.Identity()
    m.append(nn.Linear(6, 2))


CASES += [changed_model(_replace, "layer_replaced"), changed_model(_grow, "layer_added"),
          changed_model(_shrink, "layer_removed_and_another_added")]


# -- reading ------------------------------------------------------------------------------------

@case
def runs_show_on_a_fifo(d):
    p = d / "f.gvrun"
    os.mkfifo(p)
    return refused_cleanly(["runs", "show", str(p)])


@case
def runs_diff_on_a_fifo(d):
    p = d / "f.gvrun"
    os.mkfifo(p)
    return refused_cleanly(["runs", "diff", str(good_run(d)), str(p)])


@case
def runs_show_on_a_device(d):
    return refused_cleanly(["runs", "show", "/dev/zero"])


@case
def runs_show_on_a_socket(d):
    p = d / "s.gvrun"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(p))
    return refused_cleanly(["runs", "show", str(p)])


@case
def runs_show_whose_wal_is_a_fifo(d):
    p = good_run(d)
    os.mkfifo(f"{p}-wal")
    code, out, err = cli("runs", "show", str(p))
    if code == 2 and "wal" in err.lower():
        return RIGHT, err.strip()[-90:]
    return WRONG, f"exit {code}: read with the FIFO for a -wal ({(out + err).strip()[-80:]})"


@case
def runs_show_on_an_empty_file(d):
    (d / "e.gvrun").write_bytes(b"")
    return refused_cleanly(["runs", "show", str(d / "e.gvrun")])


@case
def runs_show_on_an_empty_folder(d):
    (d / "empty").mkdir()
    return refused_cleanly(["runs", "show", str(d / "empty")])


@case
def runs_diff_with_a_bad_step(d):
    return refused_cleanly(["runs", "diff", f"{good_run(d)}@soon", str(good_run(d, 'b.gvrun'))])


@case
def runs_diff_with_a_huge_step(d):
    p = good_run(d)
    code, out, err = cli("runs", "diff", f"{p}@{10 ** 30}", str(p))
    return (RIGHT, "last step used") if code == 0 else (WRONG, f"exit {code}: {err.strip()[-90:]}")


def meta_edit(key, value):
    def run(d):
        p = good_run(d)
        conn = sqlite3.connect(p)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
        conn.commit()
        conn.close()
        return refused_cleanly(["runs", "show", str(p)], says="corrupt")
    run.__name__ = f"meta_{key}_as_{value[:12]}"
    return run


for key, value in (("rank", '"3"'), ("rank", "[1]"), ("world_size", '"two"'), ("created", '"yesterday"'),
                   ("created", "1e300"), ("param_names", "7"), ("param_shapes", '"big"'), ("pid", "[]"),
                   ("model_class", "{}"), ("param_shards", '"x"')):
    CASES.append(meta_edit(key, value))


def cell_edit(column, sql_value):
    def run(d):
        p = good_run(d)
        conn = sqlite3.connect(p)
        conn.execute(f"UPDATE steps SET {column} = {sql_value} WHERE step = 2")
        conn.commit()
        conn.close()
        return refused_cleanly(["runs", "show", str(p)], says="corrupt")
    run.__name__ = f"column_{column}_as_{sql_value[:10]}"
    return run


for column, sql_value in (("loss", "'abc'"), ("time", "'noon'"), ("grad_norm", "x'01'"), ("grad_norms", "'text'"),
                          ("grad_norms", "x'000000'"), ("node_sampled", "'yes'")):
    CASES.append(cell_edit(column, sql_value))


@case
def graph_json_that_is_a_list(d):
    p = good_run(d)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE graphs SET graph = '[1, 2, 3]'")
    conn.commit()
    conn.close()
    return refused_cleanly(["runs", "diff", f"{p}@2", f"{p}@6"], says="corrupt")


@case
def node_norms_of_the_wrong_length(d):
    p = good_run(d)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE node_norms SET norms = x'0000803f'")
    conn.commit()
    conn.close()
    return refused_cleanly(["runs", "diff", f"{p}@2", f"{p}@6"])


@case
def norms_near_the_float_limit(d):
    p = good_run(d)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE steps SET grad_norm = 1e308")
    conn.commit()
    conn.close()
    code, out, err = cli("runs", "show", str(p), "--json")
    if code != 0:
        return WRONG, f"exit {code}"
    median = json.loads(out)["ranks"][0]["grad_norm"]["median"]
    return (RIGHT, "median 1e308") if median == 1e308 else (WRONG, f"median {median}")


def killed_run(p: Path) -> None:
    code = textwrap.dedent(f"""
        import os, torch, gradviz
        from torch import nn
        m = nn.Linear(3, 2)
        w = gradviz.watch(m, {str(p)!r}, every=0, commit_every=1)
        for i in range(12):
            m.zero_grad(); m(torch.randn(2, 3)).sum().backward(); w.step(float(i))
        os.kill(os.getpid(), 9)
    """)
    subprocess.run([sys.executable, "-c", code], timeout=120)


@case
def a_killed_run_copied_without_its_wal(d):
    killed_run(d / "k.gvrun")
    shutil.copyfile(d / "k.gvrun", d / "copy.gvrun")
    code, out, err = cli("runs", "show", str(d / "copy.gvrun"))
    if "wal" in (out + err).lower():
        return RIGHT, "says the -wal is missing"
    return WRONG, f"exit {code}: {(err or out).strip()[-100:]}"


@case
def a_killed_run_on_a_read_only_mount_without_its_shm(d):
    if not root_only():
        raise SkipCase("needs root for a read-only bind mount")
    (d / "src").mkdir()
    (d / "ro").mkdir()
    killed_run(d / "src" / "k.gvrun")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(d / "src" / "k.gvrun-shm")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(d / "src" / "k.gvrun-lock")
    subprocess.run(["mount", "--bind", str(d / "src"), str(d / "ro")], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(d / "ro")], check=True)
        code, out, err = cli("runs", "show", str(d / "ro" / "k.gvrun"), "--json")
    finally:
        subprocess.run(["umount", "-l", str(d / "ro")])
    if code == 0 and json.loads(out)["ranks"][0]["steps"] == 12:
        return RIGHT, "all 12 steps read"
    return WRONG, f"exit {code}: {err.strip()[-90:]}"


@case
def reading_a_live_run_changes_nothing(d):
    p = d / "live.gvrun"
    a = writer_process(p)
    try:
        before = {x: digest(Path(f"{p}{x}")) for x in ("", "-wal")}
        cli("runs", "show", str(p))
        cli("runs", "diff", f"{p}@first", str(p))
        after = {x: digest(Path(f"{p}{x}")) for x in ("", "-wal")}
    finally:
        a.kill()
        a.wait()
    return (RIGHT, "bytes unchanged") if before == after else (DANGER, "a reader changed the run file")


@case
def a_truncated_run(d):
    p = good_run(d)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return refused_cleanly(["runs", "show", str(p)])


@case
def a_run_from_a_newer_gradviz(d):
    p = good_run(d)
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA user_version=99")
    conn.commit()
    conn.close()
    return refused_cleanly(["runs", "show", str(p)], says="newer")


# -- the runner -----------------------------------------------------------------------------------

HUNG = [False]


def _alarm(signum, frame):
    HUNG[0] = True                              # (a CLI guard may turn the exception into an exit status)
    raise Hang()


def main() -> int:
    signal.signal(signal.SIGALRM, _alarm)
    import logging

    logging.disable(logging.WARNING)            # the cases' expected warnings are not the sweep's output
    counts = {RIGHT: 0, WRONG: 0, DANGER: 0, SKIP: 0}
    only = sys.argv[1:]
    for fn in CASES:
        if only and not any(o in fn.__name__ for o in only):
            continue
        d = Path(tempfile.mkdtemp(prefix="gvsweep-"))
        HUNG[0] = False
        signal.alarm(60)
        try:
            verdict, note = fn(d)
        except Hang:
            verdict, note = DANGER, "hung (60 s)"
        except SkipCase as exc:
            verdict, note = SKIP, str(exc)
        except Exception as exc:
            verdict, note = WRONG, f"the case raised {type(exc).__name__}: {str(exc)[:100]}"
        finally:
            signal.alarm(0)
            shutil.rmtree(d, ignore_errors=True)
        if HUNG[0]:
            verdict, note = DANGER, "hung (60 s)"
        counts[verdict] += 1
        print(f"{verdict:9s} {fn.__name__:55s} {note}", flush=True)
    tried = counts[RIGHT] + counts[WRONG] + counts[DANGER]
    print(f"\n{tried} tried: {counts[RIGHT]} right, {counts[WRONG]} wrong, {counts[DANGER]} dangerous"
          f" ({counts[SKIP]} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
