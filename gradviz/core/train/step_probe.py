"""The numbers of a model as it is now: what "step S" means everywhere in the window.

The state at step S is the model after S optimizer updates: its parameter values, and the
gradient of one forward and backward of step S's batch at those values (the k micro-batches
of an accumulating run). That is what a trace of the script gives at step 0, and what the
trainer's step S measures before it updates (``row.step == S``): a traced graph, the live
sampled norms and a probe of a paused model all name their numbers the same way.

``probe_step(trainer)`` measures that state without changing the run: no update, the
gradients the last step left are put back, and the random number generators are forked so
a script with dropout or random batches trains on exactly as it would have (the probe draws
from the trainer's own stream, ``core/runtime/random_state.py``, as its next step will). No Qt here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gradviz.core.stats.steps import loss_value
from gradviz.core.stats.tensors import tensor_stats

if TYPE_CHECKING:
    from gradviz.core.train.trainer import Trainer


def probe_step(trainer: "Trainer", detail: str | None = None) -> dict:
    """``{"step": S, "loss": L, "norms": {node id: norm}, "nodes": {node id: {"grad", "value"}}}``
    of the trainer's model now (S = ``trainer.step_index``): every node's gradient norm, every
    parameter's full statistics and, for ``detail`` (an op or input id), its full gradient
    statistics too."""
    s = trainer.step_index
    params = list(trainer.model.named_parameters())
    kept = [p.grad for _, p in params]
    devices = [trainer.device.index or 0] if trainer.device.type == "cuda" else []
    saved_detail = trainer.detail_node
    try:
        for _, p in params:
            p.grad = None
        with trainer.random_state.peeking(devices):
            trainer.detail_node = detail
            loss_sum, norms = trainer._forward_backward(s, True)
        loss = loss_value(loss_sum) / trainer.config.accumulation
        scale = float(trainer.scaler.get_scale()) if trainer.scaler is not None else 1.0
        nodes: dict[str, dict] = {}
        norms = dict(norms or {})
        with torch.no_grad():
            for name, p in params:
                nid = f"param:{name}"
                grad = None if p.grad is None else (p.grad if scale == 1.0 else p.grad / scale)
                g = tensor_stats([grad]) if grad is not None else None
                nodes[nid] = {"grad": g, "value": tensor_stats([p.detach()])}
                norms[nid] = None if g is None else g["norm"]
        last = trainer.sampler.last_detail
        if detail is not None and not detail.startswith("param:") and last is not None and last[0] == detail:
            nodes[detail] = {"grad": last[1], "value": None}
    finally:
        trainer.detail_node = saved_detail
        for (_, p), g in zip(params, kept):
            p.grad = g
    return {"step": s, "loss": loss, "norms": norms, "nodes": nodes, "detail": detail}
