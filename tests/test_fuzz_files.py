"""Fuzzing the readers of files a user opens, and the command line's arguments (issue #24: the fuzz suite).

Bounded in time (hypothesis: a few dozen examples per target, no per-example deadline: the machine is
shared). Each target has one promise:

- ``.pt2`` archives mutated (bytes flipped, members cut, JSON values replaced by hostile strings, code,
  wrong types): ``load_program`` returns a program or raises a ``ScriptError``, never another exception,
  and no payload runs (a marker file stays empty);
- weights files mutated (``torch.save`` zips, safetensors headers): ``read_state_dict`` likewise;
- random argv for every command: exit 0 or 2, at most one message line, never 1, never a traceback.
"""
from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradviz.core.runtime.errors import ScriptError
from gradviz.core.script.checkpoints import read_state_dict

FUZZ = settings(max_examples=int(os.environ.get("GRADVIZ_FUZZ_EXAMPLES", "40")), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
EXPORT = """\
import sys, torch
from torch import nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("buf", torch.ones(2))
    def forward(self, x):
        return self.lin(x) + self.buf + x.shape[0]
torch.manual_seed(0)
x = torch.randn(4, 3)
ep = torch.export.export(M(), (x,), dynamic_shapes=({0: torch.export.Dim("b", min=2, max=64)},))
torch.export.save(ep, sys.argv[1])
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "clean.pt2"
    subprocess.run([sys.executable, "-c", EXPORT, str(path)], check=True, capture_output=True, timeout=300)
    marker = folder / "marker"
    marker.write_text("")
    return path, marker


def _hostile_strings(marker: Path) -> list:
    run = f"open({str(marker)!r}, 'a').write('ran')"
    return [f"__import__('builtins').exec({run!r})", f'x" if {run} else "x', "torch.os.system",
            f"s0 + 0*len(repr({run}))", "\x00", "a\nb", '"""', "\\N{x}", "../../etc/passwd", "é" * 300, "",
            "L['x'].size()[0] <= 64 or exec('1')", "collections.defaultdict", {"__enum__": True, "fqn": "os:system"},
            -1, 2 ** 80, 1e308, float("nan"), None, True, [], {}]


def _mutate_json(doc, rng: random.Random, hostile: list, edits: int):
    """``doc`` with ``edits`` leaves replaced by hostile values (strings, code, wrong types)."""
    doc = json.loads(json.dumps(doc))
    paths = []

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, path + [k])
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + [i])
        else:
            paths.append(path)
    walk(doc, [])
    for _ in range(edits if paths else 0):
        path = rng.choice(paths)
        target = doc
        for key in path[:-1]:
            target = target[key]
        if isinstance(target, (dict, list)):
            try:
                target[path[-1]] = rng.choice(hostile)
            except (IndexError, KeyError, TypeError):
                pass     # a path a previous edit removed
    return doc


def _rewrite(src: Path, dst: Path, change) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename, data)


def _loads_or_refuses(path: Path, marker: Path) -> None:
    from gradviz.core.script.factory import Invented

    try:
        Invented(program=str(path)).build_model()       # load_program, then module(), as gradviz does
    except ScriptError:
        pass
    assert marker.read_text() == ""


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), edits=st.integers(1, 6))
def test_a_mutated_program_json_runs_nothing(program, tmp_path, seed, edits):
    clean, marker = program
    rng = random.Random(seed)
    hostile = _hostile_strings(marker)
    mutated = tmp_path / f"m{seed}.pt2"

    def change(name, data):
        if name.endswith(".json"):
            try:
                return json.dumps(_mutate_json(json.loads(data), rng, hostile, edits)).encode()
            except ValueError:
                return data
        return data
    _rewrite(clean, mutated, change)
    _loads_or_refuses(mutated, marker)


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(1, 64), cut=st.booleans())
def test_a_mutated_program_archive_runs_nothing(program, tmp_path, seed, flips, cut):
    clean, marker = program
    rng = random.Random(seed)
    data = bytearray(clean.read_bytes())
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if cut:
        data = data[:rng.randrange(1, len(data))]
    mutated = tmp_path / f"b{seed}.pt2"
    mutated.write_bytes(bytes(data))
    _loads_or_refuses(mutated, marker)


class _Payload:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({self.marker!r}, 'a').write('ran')",))


@FUZZ
@given(seed=st.integers(0, 2**32 - 1), flips=st.integers(0, 24), evil=st.booleans(), cut=st.booleans())
def test_a_mutated_weights_file_runs_nothing(program, tmp_path, seed, flips, evil, cut):
    _, marker = program
    rng = random.Random(seed)
    state = {"0.weight": torch.randn(3, 4), "0.bias": torch.randn(3)}
    if evil:
        state["extra"] = _Payload(str(marker))
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = bytearray(buffer.getvalue())
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if cut:
        data = data[:rng.randrange(1, len(data))]
    path = tmp_path / f"w{seed}.pt"
    path.write_bytes(bytes(data))
    try:
        got = read_state_dict(path)
        assert all(isinstance(v, torch.Tensor) for v in got.values())
    except ScriptError:
        pass
    assert marker.read_text() == ""


@FUZZ
@given(header=st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.text(max_size=8)),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=4), max_leaves=12),
       body=st.binary(max_size=256), declared=st.integers(0, 2**64 - 1))
def test_a_lying_safetensors_header_is_refused(tmp_path, header, body, declared):
    text = json.dumps({"w": header}).encode()
    path = tmp_path / "x.safetensors"
    path.write_bytes(min(declared, len(text)).to_bytes(8, "little") + text + body)
    try:
        got = read_state_dict(path)
        assert all(isinstance(v, torch.Tensor) for v in got.values())
    except ScriptError:
        pass


# -- the command line ------------------------------------------------------------------------------------

VALUES = st.sampled_from(["0", "-1", "1", "2", "nan", "inf", "-inf", "1e308", "1e-9", "99999999999999999999999",
                          "", "abc", "auto", "\x1b[31mred", "a\nb", "3.5", "-0", "1_000", "x" * 5000, "ce:0",
                          "2,16:long", "0,8", ",", "sum", "cpu", "meta", "cuda:99"])
OPTIONS = {
    "export": ["--collapse", "--step", "--scale", "--dpi", "--max-pixels", "--device", "--timeout", "--input",
               "--loss", "--weights", "-o"],
    "check": ["--steps", "--timeout", "--fail-on", "--input", "--loss", "--weights"],
    "gradcheck": ["--eps", "--samples", "--atol", "--rtol", "--timeout"],
    "train": ["--steps", "--lr", "--clip", "--agc", "--agc-eps", "--label-smoothing", "--accum", "--seed", "--every",
              "--optimizer", "--schedule", "--device", "--timeout"],
    "attribute": ["--method", "--target", "--steps", "--baseline", "--step", "--example", "--device", "-o"],
    "runs show": [],
    "runs diff": ["--top"],
}


@FUZZ
@given(command=st.sampled_from(sorted(OPTIONS)), data=st.data())
def test_random_arguments_are_exit_0_or_2_in_one_line(tmp_path, monkeypatch, capsys, command, data):
    from gradviz.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADVIZ_CACHE", str(tmp_path / "cache"))
    options = data.draw(st.lists(st.tuples(st.sampled_from(OPTIONS[command] or ["--json"]), VALUES), max_size=4))
    target = data.draw(st.sampled_from(["missing.py", "missing.pt2", "pkg.mod:build", "missing.gvrun", "x" * 300]))
    argv = command.split() + [target] + (["other.gvrun"] if command == "runs diff" else [])
    for flag, value in options:
        argv += [flag] if flag == "--json" else [flag, value]
    try:
        status = main(argv)
    except SystemExit as exc:      # --help / --version only
        status = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status in (0, 2), (argv, status, err)
    assert "Traceback" not in err and "internal error" not in err and "\x1b" not in err, (argv, err)
    assert len(lines) <= 2, (argv, err)          # a note of what gradviz invents, then the one error
