"""A trace runs its forward and backward with all cores but one (``core/runtime/threads.py``) and gives
the calling thread its torch thread count back, also when the script fails."""
from __future__ import annotations

import pytest
import torch

import gradviz
from gradviz.core.runtime.devices import training_threads
from gradviz.core.runtime.errors import ScriptError
from gradviz.core.runtime.threads import threads_for, trace_threads

SCRIPT = """\
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        with open({log!r}, "a") as f:
            f.write(f"{{torch.get_num_threads()}} ")
        {fail}
        return self.lin(x)

def model():
    return Net()

def batch(step):
    return torch.ones(4, 3), None

def loss_fn(out, targets):
    return out.sum()
"""


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _seen(path):
    return [int(line) for line in (path.parent / "threads.log").read_text().split()]


def test_trace_runs_with_all_cores_but_one_and_restores(tmp_path, threads):
    path = tmp_path / "net.py"
    path.write_text(SCRIPT.format(fail="", log=str(tmp_path / "threads.log")))
    g = gradviz.trace(path, details="norms")
    assert g.nodes["param:lin.weight"]["grad_norm"] == pytest.approx(torch.full((2, 3), 4.0).norm().item())
    assert _seen(path) == [min(training_threads(), 2)]
    assert torch.get_num_threads() == 2
    gradviz.trace(path, details="norms", threads=0)          # 0: torch's setting as it is
    gradviz.trace(path, details="norms", threads=1)
    assert _seen(path)[-2:] == [2, 1]
    assert torch.get_num_threads() == 2


def test_a_loss_tensor_is_traced_with_torchs_own_setting(threads):
    seen = []
    x = torch.ones(3, requires_grad=True)
    y = (x * 2).sum()
    y.grad_fn.register_prehook(lambda g: seen.append(torch.get_num_threads()))
    gradviz.trace(y)
    gradviz.trace(y, threads=1)
    assert seen == [2, 1] and torch.get_num_threads() == 2


def test_thread_count_restored_when_the_forward_raises(tmp_path, threads):
    path = tmp_path / "bad.py"
    path.write_text(SCRIPT.format(fail="raise RuntimeError('boom')", log=str(tmp_path / "threads.log")))
    with pytest.raises(ScriptError, match="boom"):
        gradviz.trace(path, threads=1)
    assert torch.get_num_threads() == 2


def test_threads_option_checked_and_policy():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            gradviz.trace(torch.ones(1, requires_grad=True).sum(), threads=bad)
    assert threads_for(0) is None and threads_for(3) == 3 and threads_for(None) == training_threads()
    assert threads_for(None, script=False) is None and threads_for(2, script=False) == 2
    before = torch.get_num_threads()
    with trace_threads(None):
        assert torch.get_num_threads() == min(before, training_threads())
    assert torch.get_num_threads() == before


def test_details_replay_runs_with_the_traces_thread_count(tmp_path, threads):
    from gradviz.core.trace.details import node_details

    path = tmp_path / "net.py"
    path.write_text(SCRIPT.format(fail="", log=str(tmp_path / "threads.log")))
    g = gradviz.trace(path, details="norms")
    got = node_details(g, ["param:lin.weight"])
    assert got["param:lin.weight"]["grad_norm"] == pytest.approx(g.nodes["param:lin.weight"]["grad_norm"])
    assert _seen(path) == [min(training_threads(), 2)] * 2      # the trace, then the replay
    assert torch.get_num_threads() == 2
