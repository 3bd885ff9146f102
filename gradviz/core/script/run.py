"""A script's model and batch set up the way ``trace`` sets them up, for the parts that run
the forward again (attribution, the failing forward, cut branches): same seed, same device,
same ``batch(step)``, float inputs made to require grad (so node ids match the trace's)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradviz.core.runtime.devices import model_device, to_device
from gradviz.core.runtime.random_state import seeded
from gradviz.core.script.load import ModelScript


@dataclass
class ScriptRun:
    model: nn.Module
    device: torch.device
    inputs: tuple
    targets: Any


def prepare(script: ModelScript, *, step: int = 0, seed: int | None = 0, device: str | None = None,
            input_grads: bool = True) -> ScriptRun:
    with seeded(seed):
        model = script.new_model()
        dev = torch.device(device) if device else model_device(model)
        model.to(dev)
        inputs, targets = script.get_batch(step)
    inputs = tuple(to_device(t, dev) for t in inputs)
    targets = to_device(targets, dev)
    if input_grads:
        inputs = tuple(t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs)
    return ScriptRun(model, dev, inputs, targets)
