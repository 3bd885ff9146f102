"""``gradviz run``'s recorder: finds the model of an unmodified training script and records it with ``watch``.

Nothing in the script changes. Before it runs, ``ScriptRecorder`` installs process-wide, public hooks:

* a global module forward pre-/post-hook (``register_module_forward_pre_hook`` / ``_forward_hook``) notes
  the *top-level* modules called (those called while no other module runs), until the model is known;
* a global optimizer step post-hook (``register_optimizer_step_post_hook``): at the first step of the
  first optimizer, the model is the top-level module holding most of that optimizer's parameters (a
  ``ParameterList`` of them when no module holds them); ``watch(model, path, every, optimizer)`` starts
  there and every later step of that optimizer becomes ``w.step(loss)``, the loss being the sum of the
  roots of the backwards since the last step. Other optimizers (a GAN's second one) are named in the run's
  meta (``loop_models``) and by ``gradviz run``: the loop doctor still checks them; their model is not
  recorded;
* the loop doctor (``gradviz.core.loop.doctor``), which sees each backward through the backward tap.

``--steps N``: after the N-th recorded step the post-hook raises ``StopRun`` out of ``optimizer.step()``,
so the script's own ``finally`` blocks and context managers run on the way out.
"""
from __future__ import annotations

import logging
import os
import weakref
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch import nn

from gradviz.core.loop.doctor import LoopDoctor
from gradviz.core.record.recorder import Watch
from gradviz.core.record.tap import BackwardTap

log = logging.getLogger(__name__)

__all__ = ["ScriptRecorder", "StopRun"]


class StopRun(BaseException):
    """Raised out of ``optimizer.step()`` after ``--steps`` recorded steps (a BaseException: a script's
    ``except Exception`` does not swallow it)."""


class ScriptRecorder:
    def __init__(self, path: str | os.PathLike, every: int = 10, steps: int | None = None) -> None:
        self.path = path
        self.every = every
        self.steps = steps
        self.watch: Watch | None = None
        self.optimizer: weakref.ref | None = None
        self.model: nn.Module | None = None
        self.others: dict[int, dict] = {}             # id(optimizer) -> what gradviz run says about it
        self.error: BaseException | None = None
        self._recorded_info: dict | None = None
        self.doctor = LoopDoctor(every=every or 10, on_change=self._store, keep_loss=True)
        self._tap = BackwardTap(self.doctor)
        self._top: list[weakref.ref] = []
        self._depth = 0
        self._module_hooks = [nn.modules.module.register_module_forward_pre_hook(self._enter),
                              nn.modules.module.register_module_forward_hook(self._leave, always_call=True)]
        self._post = register_optimizer_step_post_hook(self._after_step)

    def start(self) -> None:
        """In the script's thread, just before it runs: the backward tap waits for its backwards."""
        self._tap.arm()

    # -- finding the model -------------------------------------------------------
    def _enter(self, module: nn.Module, args: tuple) -> None:
        if self._depth == 0 and not any(r() is module for r in self._top):
            self._top.append(weakref.ref(module))
        self._depth += 1

    def _leave(self, module: nn.Module, args: tuple, output: Any) -> None:
        self._depth = max(0, self._depth - 1)

    def _stop_following_modules(self) -> None:
        for h in self._module_hooks:
            h.remove()
        self._module_hooks.clear()

    def _owner(self, optimizer: torch.optim.Optimizer) -> nn.Module:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        ids = {id(p) for p in params}
        best, overlap = None, 0
        for ref in self._top:
            m = ref()
            if m is None:
                continue
            n = sum(1 for p in m.parameters() if id(p) in ids)
            if n > overlap:
                best, overlap = m, n
        if best is not None:
            return best
        return nn.ParameterList(params)

    # -- each optimizer step --------------------------------------------------------
    def _after_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        loss = self.doctor.take_loss()
        if self.optimizer is None:
            self._begin(optimizer)
        if self.optimizer() is not optimizer:
            self._note_other(optimizer)
            return
        self.watch.step(loss)
        if self.steps is not None and self.watch.n_steps >= self.steps:
            raise StopRun(self.steps)

    def _begin(self, optimizer: torch.optim.Optimizer) -> None:
        self._stop_following_modules()
        self.model = self._owner(optimizer)
        for ref in self._top:
            m = ref()
            if m is not None and m is not self.model and any(True for _ in m.parameters()):
                self.doctor.add_model(m, prefix=f"{type(m).__name__}:")
        self.doctor.add_model(self.model)
        self.optimizer = weakref.ref(optimizer)
        self.watch = Watch(self.model, self.path, every=self.every or None, optimizer=optimizer, loop=False)
        self._recorded_info = self._describe(optimizer, recorded=True)
        self.watch.set_info("loop_models", self.loop_models())
        self._store()

    def _describe(self, optimizer: torch.optim.Optimizer, recorded: bool) -> dict:
        owner = self.model if recorded else self._owner(optimizer)
        n = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
        return {"optimizer": type(optimizer).__name__, "model": type(owner).__name__, "parameters": int(n),
                "recorded": recorded}

    def loop_models(self) -> list[dict]:
        """The recorded model and optimizer, then the other optimizers seen (checked, not recorded)."""
        first = [self._recorded_info] if self._recorded_info is not None else []
        return first + list(self.others.values())

    def _note_other(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) in self.others:
            return
        self.others[id(optimizer)] = info = self._describe(optimizer, recorded=False)
        owner = self._owner(optimizer)
        self.doctor.add_model(owner, prefix=f"{type(owner).__name__}:")
        self.watch.set_info("loop_models", self.loop_models())
        log.debug("gradviz run: a second optimizer (%s over %s) is checked, not recorded", info["optimizer"],
                  info["model"])

    # -- the end ----------------------------------------------------------------------
    def finish(self, error: BaseException | None = None) -> None:
        """The script returned (or raised ``error``): store the findings, close the run file and every hook."""
        if error is not None and not isinstance(error, StopRun):
            self.error = error
            self.doctor.record_exception(error)
        self._stop_following_modules()
        self._post.remove()
        self._tap.disarm()
        if self.watch is None:
            self._watch_without_steps()
        self._store()
        self.doctor.close()
        if self.watch is not None:
            self.watch.close()

    def _watch_without_steps(self) -> None:
        """No optimizer ever stepped: the run file holds the model seen (if any) and the findings."""
        models = [m for m in (r() for r in self._top) if m is not None and any(True for _ in m.parameters())]
        self.model = models[0] if models else nn.Module()
        self.watch = Watch(self.model, self.path, every=None, loop=False)
        self.watch.set_info("loop_models", [])

    def _store(self) -> None:
        if self.watch is not None:
            self.watch.set_loop_findings([f.to_dict() for f in self.doctor.findings()])

    @property
    def findings(self) -> list:
        return self.doctor.findings()
