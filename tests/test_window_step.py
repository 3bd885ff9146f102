"""#27: every number on screen is the current step's and names it. Torch is the oracle: the
trained model's own gradients at the step the views name (``core/train/step_probe.py``: the
state at step S is the model after S updates, its gradient of step S's batch)."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from test_app_support import MLP, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)


def oracle(worker, step: int) -> dict:
    """{param id: (grad norm, value norm)} and the loss of the paused worker's model at ``step``,
    from a copy of it: one forward and backward of step ``step``'s batch, nothing of gradviz."""
    trainer = worker.trainer
    assert trainer.step_index == step
    model = copy.deepcopy(trainer.model)
    model.zero_grad(set_to_none=True)
    inputs, targets = trainer.script.get_batch(step)
    loss = trainer.script.compute_loss(model, inputs, targets)
    loss.backward()
    out = {f"param:{n}": (float(p.grad.norm()), float(p.detach().norm())) for n, p in model.named_parameters()}
    return out, float(loss.detach())


def train_and_pause(qtbot, window, n: int):
    panel = window.training_panel
    panel.train_steps(n)
    qtbot.waitUntil(lambda: window.document.norms_source == "training" and window.document.step == n
                    and panel.state == "paused", timeout=WAIT_MS)
    return panel


def test_selecting_a_parameter_after_training_shows_it_at_the_current_step(qtbot, full):
    """Issue #27 item 1: paused at step S, fc1.weight showed step 0's norm and std."""
    window = full
    open_and_wait(qtbot, window, MLP)
    traced = dict(window.document.graph.nodes["param:fc1.weight"])
    panel = train_and_pause(qtbot, window, 30)
    want, loss = oracle(panel.worker, 30)
    window.select_nodes(["param:fc1.weight"])
    insp = window.inspector
    assert insp.shown_step == 30 and insp.shown_state == "current"
    assert insp.gradient.values["step"] == "step 30" and insp.values.values["step"] == "step 30"
    grad, value = want["param:fc1.weight"]
    assert float(insp.field("grad norm")) == pytest.approx(grad, rel=1e-3)
    assert float(insp.field("value norm")) == pytest.approx(value, rel=1e-3)
    assert float(insp.field("grad norm")) != pytest.approx(traced["grad_norm"], rel=1e-3)   # not step 0's
    assert window.document.live_loss == pytest.approx(loss, rel=1e-5) and window.document.loss_step == 30
    assert "30" in window.status.step.text()
