"""``GradvizCallback`` for the Hugging Face ``transformers.Trainer``: record its training with ``watch``.

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[GradvizCallback("runs/exp.gvrun", every=10)])

One row per optimizer step, numbered as the Trainer numbers it (from 1, ``state.global_step`` after the
step; its logs and checkpoints use the same numbers): recorded in ``on_pre_optimizer_step``, after the last micro-batch's
backward (gradient accumulation: the gradients of the whole step) and the all-reduce under DDP.
The Trainer clips gradients to ``max_grad_norm`` (default 1.0) *before* that callback, so the
gradient norms recorded are the clipped ones the optimizer steps with; the callback says so once
(set ``max_grad_norm=0`` to record raw norms). The loss is the step's loss as the Trainer logs it,
from the ``loss`` the model returns: when the Trainer passes ``num_items_in_batch`` (models that
take loss kwargs), each micro-batch's loss is already divided by the tokens of the whole step, so
they are summed (times the world size with ``average_tokens_across_devices``); otherwise they are
averaged. A model that returns no loss (a custom ``compute_loss``) records none; the norms are
recorded all the same. A step that cannot be written (disk full, read-only, the file removed)
raises ``RecordError`` from the next optimizer step, as ``w.step`` does: ``trainer.train()`` stops there.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import torch
from transformers import TrainerCallback

from gradviz.core.record import watch

log = logging.getLogger(__name__)

__all__ = ["GradvizCallback"]


class GradvizCallback(TrainerCallback):
    def __init__(self, path: str | os.PathLike, every: int | None = 10, **watch_options: Any) -> None:
        self.path = path
        self.every = every
        self.watch_options = watch_options
        self.watch = None
        self._losses: list[torch.Tensor] = []
        self._per_step = False      # the model's losses are already divided by the step's token count
        self._hook = None

    def _capture_loss(self, module, args, kwargs, output) -> None:
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and torch.is_grad_enabled():
            self._losses.append(loss.detach())
            self._per_step = kwargs.get("num_items_in_batch") is not None

    def _step_loss(self, args) -> torch.Tensor | None:
        if not self._losses:
            return None
        losses = torch.stack(self._losses).float()
        self._losses.clear()
        if not self._per_step:
            return losses.mean()
        across = getattr(args, "average_tokens_across_devices", False) and getattr(args, "world_size", 1) > 1
        return losses.sum() * (args.world_size if across else 1)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if model is None:
            raise ValueError("GradvizCallback needs the Trainer's model (transformers passes it to callbacks)")
        inner = getattr(optimizer, "optimizer", optimizer)   # accelerate wraps the torch optimizer
        self.watch = watch(model, self.path, every=self.every, optimizer=inner, **self.watch_options)
        self._hook = model.register_forward_hook(self._capture_loss, with_kwargs=True)
        if getattr(args, "max_grad_norm", 0) and args.max_grad_norm > 0:
            log.warning("gradviz records the gradient norms after the Trainer clipped them to max_grad_norm=%g "
                        "(what the optimizer steps with); max_grad_norm=0 records raw norms", args.max_grad_norm)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.watch is None:
            return
        # numbered as the Trainer numbers it (state.global_step counts the steps done: this one is the next,
        # from 1), so a run's steps line up with the Trainer's logs and checkpoints
        self.watch.step(self._step_loss(args), step=state.global_step + 1)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        w, self.watch = self.watch, None
        if w is not None:
            w.close()
