"""``GradvizCallback`` for PyTorch Lightning: record a ``Trainer.fit`` with ``watch``.

    trainer = pl.Trainer(max_epochs=3, callbacks=[GradvizCallback("runs/exp.gvrun", every=10)])

One row per optimizer step, recorded in ``on_before_optimizer_step``: after backward (all
micro-batches of ``accumulate_grad_batches``, after the all-reduce under DDP) and *before*
Lightning clips gradients, so the norms are the raw ones (meta ``grad_norms`` ``"before_clip"``,
``max_grad_norm`` the ``gradient_clip_val`` of a clip by norm). The loss is what Lightning hands to
``on_before_backward`` (already divided by ``accumulate_grad_batches``), summed over the step's
micro-batches: the mean loss of the step. Works with ``pytorch_lightning`` and ``lightning.pytorch``.
A step that cannot be written (disk full, read-only, the file removed) raises ``RecordError`` from
the next optimizer step, as ``w.step`` does: the fit stops there.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import torch

try:
    from pytorch_lightning import Callback
except ImportError:  # the unified package
    from lightning.pytorch import Callback

from gradviz.core.record import RecordError, watch

log = logging.getLogger(__name__)

__all__ = ["GradvizCallback"]


class GradvizCallback(Callback):
    def __init__(self, path: str | os.PathLike, every: int | None = 10, **watch_options: Any) -> None:
        super().__init__()
        self.path = path
        self.every = every
        self.watch_options = watch_options
        self.watch = None
        self._loss: torch.Tensor | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        optimizers = trainer.optimizers
        optimizer = optimizers[0] if len(optimizers) == 1 else None   # several: no update ratios
        self.watch = watch(pl_module, self.path, every=self.every, optimizer=optimizer, **self.watch_options)
        # the norms are read before Lightning clips (as the HF callback's): the meta says so, and the threshold
        clip = trainer.gradient_clip_val
        by_norm = str(getattr(trainer, "gradient_clip_algorithm", "norm") or "norm").lower().endswith("norm")
        self.watch.set_info("grad_norms", "before_clip")
        self.watch.set_info("max_grad_norm", float(clip) if clip and by_norm else None)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        part = loss.detach().float()
        self._loss = part if self._loss is None else self._loss + part

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.watch is not None:
            self.watch.step(self._loss)
        self._loss = None

    def on_train_end(self, trainer, pl_module) -> None:
        self.close()

    def on_exception(self, trainer, pl_module, exception) -> None:
        # Lightning re-raises ``exception`` after this hook: a RecordError from closing (the disk
        # that failed the run's step is still full) is logged, never raised over the original
        try:
            self.close()
        except RecordError as exc:
            log.warning("gradviz: %s", exc)

    def close(self) -> None:
        w, self.watch = self.watch, None
        if w is not None:
            w.close()
