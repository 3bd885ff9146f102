"""The backward tap of ``watch``: a registered process patch, undone, and its slower fallback.

Run on every supported torch (2.13 and 2.14 here: ``Tensor.backward`` must reach
``torch.autograd.backward`` through the module attribute on each).
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.core.runtime import process_patches
from gradviz.core.runtime.process_patches import BACKWARD_TAP, PATCHES, backward_dispatch
from gradviz.core.record import open_run, watch
from gradviz.core.record import tap


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _loop(model, path, steps=4, every=2, before_backward=None, loop=True):
    with watch(model, path, every=every, loop=loop) as w:
        for step in range(steps):
            g = torch.Generator().manual_seed(step)
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(torch.randn(6, 4, generator=g)),
                                               torch.randint(3, (6,), generator=g))
            if before_backward is not None:
                before_backward(step)
            loss.backward()
            w.step(loss)
    with open_run(path) as r:
        return {s: r.node_norms(s)[1] for s in r.node_steps()}


@pytest.fixture
def fresh_tap(monkeypatch):
    """The tap's process state as a new process has it (restored after the test)."""
    monkeypatch.setattr(tap, "_state", {"failed": False})
    monkeypatch.setitem(process_patches._tap, "seen", False)
    yield
    assert tap._waiting == {} and not tap._MODES
    assert torch.autograd.backward is ORIGINAL


ORIGINAL = torch.autograd.backward


def test_registered_with_its_reason_and_undone_between_sampled_steps(tmp_path, fresh_tap):
    patch = PATCHES["backward-tap"]
    assert patch is BACKWARD_TAP and "before the backward runs" in patch.why
    seen = []

    def look(step):          # just before each step's backward: is the dispatcher in place?
        seen.append(torch.autograd.backward is backward_dispatch)

    norms = _loop(_model(), tmp_path / "t.gvrun", steps=5, every=2, before_backward=look, loop=False)
    assert seen == [True, False, True, False, True]        # installed for sampled steps only
    assert sorted(norms) == [0, 2, 4]
    assert torch.autograd.backward is ORIGINAL and not patch.installed


def test_with_the_loop_doctor_also_on_its_checked_steps_and_the_step_after(tmp_path, fresh_tap):
    """The loop doctor (loop=True, the default) sees the backwards of the steps it checks (0, 1, 2 and every
    10th) and of the step after each; between them the tap is off as before."""
    seen = []
    _loop(_model(), tmp_path / "t.gvrun", steps=14, every=10, before_backward=lambda s: seen.append(
        torch.autograd.backward is backward_dispatch))
    assert seen == [True] * 4 + [False] * 6 + [True, True] + [False] * 2
    assert torch.autograd.backward is ORIGINAL


def test_the_slower_path_when_the_patch_cannot_be_installed(tmp_path, fresh_tap, monkeypatch, caplog):
    """An install that fails: one warning, the TorchFunctionMode path, the same node norms,
    and the user's loop never sees an error."""
    expected = _loop(_model(), tmp_path / "fast.gvrun")

    def refuse():
        raise RuntimeError("simulated: torch.autograd.backward cannot be replaced")
    monkeypatch.setattr(BACKWARD_TAP, "install", refuse)
    monkeypatch.setattr(tap, "_state", {"failed": False})
    modes = []
    logger = logging.getLogger("gradviz")        # (the CLI, run in-process by other tests, stops propagation)
    own = not logger.propagate
    if own:
        logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="gradviz"):
            got = _loop(_model(), tmp_path / "slow.gvrun", before_backward=lambda s: modes.append(bool(tap._MODES)))
    finally:
        if own:
            logger.removeHandler(caplog.handler)
    assert modes == [True, False, True, False]
    assert "TorchFunctionMode" in caplog.text and "simulated" in caplog.text
    assert caplog.text.count("backward tap is unavailable") == 1
    assert sorted(got) == sorted(expected) == [0, 2]
    for step in expected:
        assert got[step].keys() == expected[step].keys()
        for nid, v in expected[step].items():
            assert (v is None) == (got[step][nid] is None), nid
            if v is not None:
                assert got[step][nid] == pytest.approx(v, rel=1e-6), nid


def test_a_torch_whose_tensor_backward_bypasses_the_module_attribute(monkeypatch, fresh_tap):
    """The install probe: if ``Tensor.backward`` stops calling ``torch.autograd.backward`` (a
    future torch), the patch refuses to install and leaves the function as it was."""
    original = torch.autograd.backward

    def direct_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        original(self, gradient, retain_graph, create_graph, inputs=inputs)    # bound before the swap
    monkeypatch.setattr(torch.Tensor, "backward", direct_backward)
    assert BACKWARD_TAP.apply() is False
    assert torch.autograd.backward is original and not BACKWARD_TAP.installed


def test_another_wrapper_installed_over_the_tap_is_left_working(tmp_path, fresh_tap, monkeypatch):
    """Something else wraps torch.autograd.backward while the tap is installed: the tap stays
    in place, inert (taking it out or putting it back would break or loop their chain)."""
    calls = []
    model = _model()
    w = watch(model, tmp_path / "w.gvrun", every=2)
    inner = torch.autograd.backward
    assert inner is backward_dispatch

    def theirs(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)
    monkeypatch.setattr(torch.autograd, "backward", theirs)
    for step in range(4):
        model.zero_grad()
        loss = model(torch.randn(5, 4)).pow(2).mean()
        loss.backward()
        w.step(loss)
    w.close()
    assert calls == [1, 1, 1, 1] and torch.autograd.backward is theirs
    with open_run(tmp_path / "w.gvrun") as r:
        assert r.node_steps() == [0, 2]
    monkeypatch.undo()                       # their wrapper gone: the inert dispatcher is on top again,
    BACKWARD_TAP.undo()                # and now it can leave
    assert torch.autograd.backward is ORIGINAL


def test_a_backward_raising_in_the_user_loop_is_the_users_error(tmp_path, fresh_tap):
    model = _model()
    with watch(model, tmp_path / "e.gvrun", every=1) as w:
        loss = model(torch.randn(2, 4)).sum()
        loss.backward()
        with pytest.raises(RuntimeError, match="second time"):
            loss.backward()                  # freed graph: torch's own error, unchanged
        w.step(loss)
        out = model(torch.randn(2, 4)).sum()
        out.backward()
        w.step(out)
    with open_run(tmp_path / "e.gvrun") as r:
        assert r.n_steps() == 2 and np.isfinite(r.steps()["grad_norm"]).all()
