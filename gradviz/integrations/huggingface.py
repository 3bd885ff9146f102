"""``GradvizCallback`` for the Hugging Face ``transformers.Trainer``: record its training with ``watch``.

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[GradvizCallback("runs/exp.gvrun", every=10)])

One row per optimizer step, numbered as the Trainer numbers it (from 1, ``state.global_step`` after the
step; its logs and checkpoints use the same numbers): recorded in ``on_pre_optimizer_step``, after the last micro-batch's
backward (gradient accumulation: the gradients of the whole step) and the all-reduce under DDP.
The Trainer clips gradients to ``max_grad_norm`` (default 1.0) *before* that callback; the norms
recorded are the raw ones all the same, as Lightning's callback records them: a post-accumulate-grad
hook on each watched parameter (``Tensor.register_post_accumulate_grad_hook``, public) measures its
gradient once it is complete, in the last micro-batch's backward only (accelerate's
``GradientState.sync_gradients``; the other micro-batches' hooks return at once), before the clip; the
step's row takes those norms and the clip's ``max_norm``, so its clipped norms follow (fp16's loss
scale is divided out). Under DDP (world size > 1) the hooks would see each rank's gradients before the
all-reduce, so there the clipped ones are recorded and the callback says so once. The loss is the step's loss as the Trainer logs it,
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
        self._grad_hooks: list = []
        self._raw: list[torch.Tensor | None] = []   # the last micro-batch's gradient norms, before the clip
        self._sync = None                           # accelerate's GradientState: is this the last micro-batch
        self._scaler = None
        self._warned = False

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
            if getattr(args, "world_size", 1) > 1:
                log.warning("gradviz records the gradient norms after the Trainer clipped them to max_grad_norm=%g "
                            "under DDP (before the all-reduce, hooks see each rank's own gradients); "
                            "max_grad_norm=0 records raw norms", args.max_grad_norm)
            else:
                self._hook_raw_norms(optimizer)

    def _hook_raw_norms(self, optimizer) -> None:
        from accelerate.state import GradientState     # the Trainer's accelerate: which micro-batch syncs

        self._sync = GradientState()
        self._scaler = getattr(optimizer, "scaler", None)   # fp16: the gradients are scaled until the clip
        params = self.watch.stats.params
        self._raw = [None] * len(params)
        self._grad_hooks = [p.register_post_accumulate_grad_hook(self._norm_hook(i)) for i, p in enumerate(params)]

    def _norm_hook(self, i: int):
        raw, sync = self._raw, self._sync

        def hook(p: torch.Tensor) -> None:
            g = p.grad
            if sync.sync_gradients and g is not None and g.layout == torch.strided:   # the whole step's, complete
                raw[i] = torch.linalg.vector_norm(g.detach()).float()
        return hook

    def _take_raw(self) -> list[torch.Tensor | None] | None:
        if not self._grad_hooks:
            return None
        norms = list(self._raw)
        self._raw[:] = [None] * len(norms)
        if self._scaler is not None and self._scaler.is_enabled():
            inv = 1.0 / self._scaler.get_scale()
            norms = [None if t is None else t * inv for t in norms]
        return norms

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.watch is None:
            return
        # numbered as the Trainer numbers it (state.global_step counts the steps done: this one is the next,
        # from 1), so a run's steps line up with the Trainer's logs and checkpoints
        raw = self._take_raw()
        self.watch.step(self._step_loss(args), step=state.global_step + 1, grad_norms=raw,
                        clipped_at=args.max_grad_norm if raw is not None else None)
        if raw is not None and not self.watch.raw_norms_used and not self._warned:
            self._warned = True     # a gradient the last micro-batch's backward did not reach (or a sharded model)
            log.warning("gradviz: step %d records the gradient norms after the Trainer's clip (a parameter's "
                        "gradient came from an earlier micro-batch only)", state.global_step + 1)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        for h in self._grad_hooks:
            h.remove()
        self._grad_hooks = []
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        w, self.watch = self.watch, None
        if w is not None:
            w.close()
