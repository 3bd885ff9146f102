"""The memory guard sees a single allocation bigger than memory before it is made (issue #24, case 11).

Before: one ``nn.Embedding`` twice the machine's memory, without ``--meta``, failed in the allocator
("DefaultCPUAllocator: can't allocate memory") although the README promises a switch to the meta device:
the guard read the resident memory *after* each allocation. Now each factory call is first asked on the
meta device (its size, no storage) and the build stops before the real call.

No test here allocates that memory: the processes that build such a model run under an address-space
limit (RLIMIT_AS) far below the parameter's size, so a real allocation could only fail, never succeed.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gradviz.core.script.fit_guard import requested_bytes

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 12 * 2**30          # the address space the processes below may use: far below the parameter
BIG = '''\
import torch
from torch import nn
model = lambda: nn.Sequential(nn.Embedding({rows}, 1024), nn.Linear(1024, 2))
def batch(step):
    return torch.randint(0, 100, (2, 3)), None
def loss_fn(out, y):
    return out.sum()
'''


def _rows() -> int:
    """A 1024-wide float32 embedding of twice this machine's memory."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return 2 * total // (1024 * 4)


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _gradviz(folder: Path, *argv) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0", "GRADVIZ_CACHE": str(folder / "cache")}
    return subprocess.run([sys.executable, "-m", "gradviz", *argv], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300, preexec_fn=_limited)


@pytest.mark.parametrize("call, args, kwargs", [
    (torch.empty, (3, 5), {}), (torch.zeros, ((4, 4),), {"dtype": torch.float64}), (torch.ones, (7,), {}),
    (torch.full, ((2, 3), 1.5), {}), (torch.randn, (2, 2, 2), {"dtype": torch.float16}),
    (torch.randint, (0, 9, (11,)), {}), (torch.arange, (0, 100, 3), {}), (torch.eye, (6, 4), {}),
    (torch.linspace, (0, 1, 33), {}), (torch.empty_strided, ((3, 4), (1, 3)), {}), (torch.randperm, (50,), {}),
    (torch.Tensor.new_zeros, (torch.ones(2, dtype=torch.int32), (5, 5)), {})])
def test_the_size_asked_for_is_the_size_allocated(call, args, kwargs):
    real = call(*args, **kwargs)                       # torch is the oracle
    assert requested_bytes(call, args, kwargs) == real.untyped_storage().nbytes()


def test_other_calls_and_devices_are_not_sized():
    assert requested_bytes(torch.add, (torch.ones(2), 1), {}) is None
    assert requested_bytes(torch.empty, (3,), {"device": "meta"}) is None
    assert requested_bytes(torch.empty, (3,), {"out": torch.empty(3)}) is None


def test_one_parameter_bigger_than_memory_is_stopped_before_it_is_allocated(tmp_path):
    (tmp_path / "big.py").write_text(BIG.format(rows=_rows()))
    code = ("import sys; from gradviz.core.script.load import load_script; "
            "from gradviz.core.script.fit_guard import TooBig, build_within_memory\n"
            "try:\n    build_within_memory(load_script(sys.argv[1]))\nexcept TooBig as exc:\n"
            "    print('stopped:', exc.detail)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "big.py")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300, preexec_fn=_limited)
    assert proc.stdout.startswith("stopped: one tensor of"), proc.stderr[-2000:]
    gib = _rows() * 1024 * 4 / 2**30
    assert f"{gib:.1f} GiB asked for" in proc.stdout


@pytest.mark.parametrize("command", [["export", "big.py", "-o", "g.json"], ["check", "big.py", "--json"]])
def test_the_command_switches_to_meta_as_the_readme_promises(tmp_path, command):
    (tmp_path / "big.py").write_text(BIG.format(rows=_rows()))
    proc = _gradviz(tmp_path, *command)
    assert "tracing its structure on the meta device instead" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "allocate" not in proc.stderr
    if command[0] == "export":
        assert proc.returncode == 0
        graph = json.loads((tmp_path / "g.json").read_text())["graph"]
        assert graph["meta"] is True and graph["memory"]["params"] >= _rows() * 1024 * 4
    else:
        assert proc.returncode in (0, 1) and json.loads(proc.stdout)["findings"] is not None
