"""The shortened ordinary-step paths of #26's overhead pass give what the general paths gave.

``step_loss``'s CPU-scalar shortcut (torch's ``item()`` is the oracle; a complex loss still raises), the loop
doctor's lr-zero run with its healthy-lr shortcut (a zero lr twice in a row is found, a zero between two
non-zero ones is not), and the backward tap's one-owner route with Tensor.backward's positional arguments.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz.core.loop.doctor import LoopDoctor
from gradviz.core.record.losses import step_loss
from gradviz.core.record.tap import BackwardTap


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
def test_cpu_scalar_loss_is_torchs_item(dtype, shape):
    loss = torch.full(shape, 3, dtype=dtype) if dtype is not torch.bool else torch.ones(shape, dtype=dtype)
    got = step_loss(loss, True)
    assert got == loss.item() and type(got) is type(loss.item())


def test_cpu_complex_and_several_values_still_raise():
    with pytest.raises(TypeError, match="must be real"):
        step_loss(torch.tensor(1 + 2j), True)
    with pytest.raises(TypeError, match="one value"):
        step_loss(torch.ones(2), True)


def test_cpu_loss_under_a_device_watch_stays_a_tensor():
    loss = torch.tensor(2.5, requires_grad=True) * 2
    got = step_loss(loss, False)
    assert isinstance(got, torch.Tensor) and not got.requires_grad and got.item() == loss.item()


def _lr_findings(lrs: list) -> list:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    doctor = LoopDoctor(every=10)
    doctor.add_model(model)
    try:
        for lr in lrs:
            opt.param_groups[0]["lr"] = lr
            opt.zero_grad()
            model(torch.ones(2, 3)).sum().backward()
            opt.step()
        return [f for f in doctor.findings() if f.code == "lr-zero"]
    finally:
        doctor.close()


def test_lr_zero_twice_in_a_row_is_found_and_a_zero_between_healthy_steps_is_not():
    found = _lr_findings([0.1, 0.0, 0.0, 0.1])
    assert len(found) == 1 and found[0].data["step"] == 1
    assert _lr_findings([0.1, 0.0, 0.1, 0.0, 0.1, 0.0]) == []
    assert _lr_findings([0.1, 0.0, torch.tensor(0.1), 0.0]) == []       # a tensor lr ends the run too


class _Owner:
    def __init__(self) -> None:
        self.roots: list = []

    def sampled_backward(self, root, run) -> None:
        self.roots.append(root)
        run()


def test_one_owner_route_passes_every_argument_through():
    owner = _Owner()
    tap = BackwardTap(owner)
    w = torch.ones(3, requires_grad=True)
    try:
        tap.arm()
        loss = (w * w).sum()
        loss.backward(torch.tensor(2.0), retain_graph=True)       # positional gradient, keyword retain_graph
        loss.backward()                                           # the graph was kept: a second backward works
    finally:
        tap.disarm()
    assert owner.roots and owner.roots[0] is loss
    torch.testing.assert_close(w.grad, 2.0 * 2 * w.detach() + 2 * w.detach())
