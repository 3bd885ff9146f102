"""A forward that raises under ``watch`` raises the model's own error (issue #28: a T5 under the HF callback).

On a sampled step the watch captures module paths with forward hooks; the root's always-call hook ends
the capture. When the forward raises, torch runs the always-call hooks iterating the module's hook dict
itself, and removing the capture's hooks there raised "OrderedDict mutated during iteration" in place of
the user's error. The capture's hooks are now removed between steps.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz.core.record import open_run, watch


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 1)
        self.fail = False

    def forward(self, x):
        h = self.a(x)
        if self.fail:
            raise ValueError("the model's own error")
        return self.b(h)


def test_the_models_error_comes_through_a_sampled_step_and_recording_goes_on(tmp_path):
    torch.manual_seed(0)
    model = Fails()
    x = torch.randn(5, 3)
    with watch(model, tmp_path / "r.gvrun", every=1) as w:
        model.fail = True
        with pytest.raises(ValueError, match="the model's own error"):
            model(x)
        model.fail = False
        for _ in range(3):                             # the next steps record, node norms included
            model.zero_grad()
            model(x).sum().backward()
            w.step(1.0)
        hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    with open_run(tmp_path / "r.gvrun") as run:
        assert len(run.steps()["step"]) == 3 and len(run.node_steps()) == 3
    assert hooks <= 2                                  # the capture's hooks went (the watch's own two remain)
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == 0
