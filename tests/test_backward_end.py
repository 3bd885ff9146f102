"""``BackwardEndNorms`` (gradviz/integrations/backward_end.py): norms measured after the backward's final callbacks.

DDP writes the averaged gradients in a final callback it queues when its last bucket is ready, i.e.
*after* the first gradient hooks of the backward ran. The same order is built here without DDP: a
hook on every parameter queues, once the last gradient is accumulated, a final callback that
rewrites every ``.grad`` (as the reducer's finalize does). Torch is the oracle: the norms taken must
be those of the gradients as they are when ``backward()`` returns, not as the hooks saw them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.integrations import backward_end
from gradviz.integrations.backward_end import BackwardEndNorms

ROOT = Path(__file__).resolve().parent.parent


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))


def _finalize_like_ddp(params, scale: float):
    """When the last parameter's gradient is accumulated, queue a final callback that rewrites them all."""
    done = []

    def hook(p):
        done.append(p)
        if len(done) == len(params):
            done.clear()
            torch.autograd.Variable._execution_engine.queue_callback(
                lambda: [q.grad.mul_(scale) for q in params])
    return [p.register_post_accumulate_grad_hook(hook) for p in params]


@pytest.mark.parametrize("after_reduce", [False, True])
def test_norms_follow_a_final_callback_queued_after_the_first_hook(after_reduce):
    net = _net()
    params = list(net.parameters())
    norms = BackwardEndNorms([[p] for p in params], lambda: True, after_reduce=after_reduce)
    _finalize_like_ddp(params, 0.25)
    net(torch.randn(5, 4)).pow(2).sum().backward()
    final = np.array([p.grad.norm().item() for p in params])          # what the optimizer would see
    taken = np.array([t.item() for t in norms.take()])
    if after_reduce:
        assert norms.mode == "backward_end"
        np.testing.assert_allclose(taken, final, rtol=1e-6)
    else:                      # the hooks' own moment: before the final callback rewrote the gradients
        assert norms.mode == "hook"
        np.testing.assert_allclose(taken, final / 0.25, rtol=1e-6)
    assert norms.take() == [None] * len(params)                        # taken once
    norms.remove()


def test_a_backward_that_is_not_the_steps_last_is_not_measured():
    net = _net()
    params = list(net.parameters())
    last = {"now": False}
    norms = BackwardEndNorms([[p] for p in params], lambda: last["now"], after_reduce=True)
    net(torch.randn(5, 4)).sum().backward()                            # an earlier micro-batch
    assert norms.take() == [None] * len(params)
    last["now"] = True
    net(torch.randn(5, 4)).sum().backward()                            # the last: the accumulated gradients
    np.testing.assert_allclose([t.item() for t in norms.take()], [p.grad.norm().item() for p in params], rtol=1e-6)


def test_without_the_engines_callback_nothing_is_measured(monkeypatch):
    monkeypatch.setattr(backward_end, "_engine_queue", lambda: None)
    net = _net()
    norms = BackwardEndNorms([[p] for p in net.parameters()], lambda: True, after_reduce=True)
    assert norms.mode is None
    net(torch.randn(5, 4)).sum().backward()
    assert norms.take() is None                    # the caller records the clipped norms and says so


def test_runs_show_names_the_norms_a_trainer_callback_recorded(tmp_path):
    from gradviz.core.record import open_run, watch

    net = _net()
    with watch(net, tmp_path / "r.gvrun", every=0) as w:
        w.set_info("grad_norms", "after_clip")
        w.set_info("max_grad_norm", 0.05)
        net(torch.randn(5, 4)).sum().backward()
        w.step(1.0)
    with open_run(tmp_path / "r.gvrun") as run:
        assert run.meta["grad_norms"] == "after_clip"
    proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(tmp_path / "r.gvrun")],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "gradient norms: after the trainer's clip (max_grad_norm 0.05)" in proc.stdout


@pytest.mark.parametrize("after_reduce", [False, True])
def test_a_storage_tie_is_measured_as_its_summed_gradient(after_reduce):
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(3, 3))
    b = nn.Parameter(a)                               # another object over the same bytes
    assert b is not a and b.data_ptr() == a.data_ptr()
    norms = BackwardEndNorms([[a, b]], lambda: True, after_reduce=after_reduce)
    x = torch.randn(4, 3)
    (x @ a).tanh().sum().backward()
    ((x @ b) ** 2).sum().backward()                   # the step's last backward reaches b only
    want = (a.grad + b.grad).norm().item()
    assert abs(a.grad.norm().item() - want) > 1e-3 and abs(b.grad.norm().item() - want) > 1e-3
    np.testing.assert_allclose(norms.take()[0].item(), want, rtol=1e-6)


def _begin(tmp_path, **args):
    """The HF callback's start with the Trainer's arguments as given (sharded runs do not run on CPU here)."""
    from types import SimpleNamespace

    from gradviz.core.record import open_run
    from gradviz.integrations.huggingface import GradvizCallback

    net = _net()
    cb = GradvizCallback(tmp_path / "r.gvrun", every=0)
    full = {"max_grad_norm": 1.0, "world_size": 1, "fsdp": None, "deepspeed": None, **args}
    cb.on_train_begin(SimpleNamespace(**full), None, None, model=net, optimizer=torch.optim.SGD(net.parameters(), 0.1))
    hooked = cb._raw_norms is not None
    cb.close()
    with open_run(tmp_path / "r.gvrun") as run:
        return run.meta["grad_norms"], run.meta["max_grad_norm"], hooked


@pytest.mark.parametrize("args, env", [({"fsdp": "full_shard", "world_size": 2}, {}),
                                       ({"deepspeed": "ds.json", "world_size": 2}, {}),
                                       ({"world_size": 2}, {"ACCELERATE_USE_FSDP": "true"})])
def test_sharded_gradients_record_the_clipped_norms_and_say_so(tmp_path, monkeypatch, args, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _begin(tmp_path, **args) == ("after_clip", 1.0, False)


def test_ddp_without_the_engines_callback_records_the_clipped_norms_and_says_so(tmp_path, monkeypatch):
    assert _begin(tmp_path, world_size=2) == ("before_clip", 1.0, True)
    monkeypatch.setattr(backward_end, "_engine_queue", lambda: None)
    assert _begin(tmp_path, world_size=2) == ("after_clip", 1.0, False)
    assert _begin(tmp_path, world_size=1) == ("before_clip", 1.0, True)       # one process: the public hooks
    assert _begin(tmp_path, max_grad_norm=0.0) == ("before_clip", None, False)  # no clip: nothing to hook
