"""``GradvizCallback`` for the Hugging Face ``transformers.Trainer``: record its training with ``watch``.

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[GradvizCallback("runs/exp.gvrun", every=10)])

One row per optimizer step, numbered as the Trainer numbers it (from 1, ``state.global_step`` after the
step; its logs and checkpoints use the same numbers): recorded in ``on_pre_optimizer_step``, after the last micro-batch's
backward (gradient accumulation: the gradients of the whole step) and the all-reduce under DDP.
The Trainer clips gradients to ``max_grad_norm`` (default 1.0) *before* that callback; the norms
recorded are the raw ones all the same, as Lightning's callback records them, measured from the last
micro-batch's backward (accelerate's ``GradientState.sync_gradients``) by ``backward_end``: in one
process a post-accumulate-grad hook on each watched parameter, under DDP (world size > 1) once the
backward and DDP's all-reduce are done (the averaged gradients, the same on every rank). The step's row
takes those norms and the clip's ``max_norm`` (fp16's loss scale is divided out). The meta says which
norms a run holds: ``grad_norms`` is ``"before_clip"``, or ``"after_clip"`` where the gradients are
sharded (FSDP, DeepSpeed: each rank holds a piece until the clip) or the engine offers no end-of-backward
callback (the callback says so once), ``"mixed"`` when some steps fell back; ``max_grad_norm`` is the
clip's threshold (null: no clip). ``gradviz runs show`` prints both.
The loss is the step's loss as the Trainer logs it,
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
from gradviz.integrations.backward_end import BackwardEndNorms

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
        self._raw_norms: BackwardEndNorms | None = None   # the last micro-batch's gradient norms, before the clip
        self._scaler = None
        self._kind = "before_clip"                        # meta grad_norms: which norms the run holds

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
        clip = float(args.max_grad_norm) if getattr(args, "max_grad_norm", 0) and args.max_grad_norm > 0 else None
        kind = "before_clip"
        if clip is not None:
            sharded = _sharded(args, self.watch)
            if sharded is None:
                self._hook_raw_norms(optimizer, after_reduce=getattr(args, "world_size", 1) > 1)
            if sharded is not None or self._raw_norms is None:
                kind = "after_clip"
                log.warning("gradviz records the gradient norms after the Trainer clipped them to max_grad_norm=%g "
                            "(%s); max_grad_norm=0 records raw norms", clip,
                            sharded or "this torch's autograd engine queues no end-of-backward callback")
        self._kind = kind
        self.watch.set_info("grad_norms", kind)
        self.watch.set_info("max_grad_norm", clip)

    def _hook_raw_norms(self, optimizer, after_reduce: bool) -> None:
        from accelerate.state import GradientState     # the Trainer's accelerate: which micro-batch syncs

        sync = GradientState()
        self._scaler = getattr(optimizer, "scaler", None)   # fp16: the gradients are scaled until the clip
        norms = BackwardEndNorms(self.watch.stats.groups(), lambda: sync.sync_gradients, after_reduce=after_reduce)
        if norms.mode is None:
            return
        self._raw_norms = norms

    def _take_raw(self) -> list[torch.Tensor | None] | None:
        if self._raw_norms is None:
            return None
        norms = self._raw_norms.take()
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
        if raw is not None and not self.watch.raw_norms_used and self._kind != "mixed":
            self._kind = "mixed"    # a gradient the last micro-batch's backward did not reach
            self.watch.set_info("grad_norms", "mixed")
            log.warning("gradviz: step %d records the gradient norms after the Trainer's clip (a parameter's "
                        "gradient came from an earlier micro-batch only)", state.global_step + 1)

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        if self._raw_norms is not None:
            self._raw_norms.remove()
            self._raw_norms = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        w, self.watch = self.watch, None
        if w is not None:
            w.close()


def _sharded(args, w) -> str | None:
    """Why the gradients are sharded until the Trainer's clip (FSDP, DeepSpeed), or None: then the norms
    before the clip cannot be read from the backward (each rank holds a piece, reduced inside the clip)."""
    if getattr(args, "deepspeed", None) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true"):
        return "DeepSpeed shards the gradients"
    if getattr(args, "fsdp", None) or os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true"):
        return "FSDP shards the gradients"
    if w.stats.strategy == "sharded":
        return "the parameters are sharded (DTensor)"
    return None
