"""Live training of a model script, with per-step statistics and sampled node norms.

``Trainer(script, TrainConfig(...))`` owns a model and an optimizer made from the
script. Each ``step()`` does, in this order::

    zero_grad (unless disabled)
    for each of k micro-batches:  batch(step*k + j) -> device -> forward -> loss -> backward(loss / k)
    [GradScaler.unscale_]  ->  [adaptive clip per parameter]  ->  clip (clip_grad_norm_'s rule)
        ->  optimizer.step  ->  schedule

Two training options from seed 002: ``adaptive_clip`` (per-layer adaptive gradient clipping,
``gradviz.core.stats.adaptive_clip``: each gradient bounded by ``factor * max(||W||, eps)``; the
rows' ``param_norms_clipped`` show what the optimizer got) and ``label_smoothing`` (the
script's ``F.cross_entropy``/``nn.CrossEntropyLoss`` smoothed by ``epsilon``,
``gradviz.core.train.label_smoothing``; a loss with no cross-entropy is refused at the first step).

and returns its ``StepRow`` (see ``gradviz.core.stats.steps``): ``step``, ``loss``, ``lr``,
the gradient statistics and, on sampled steps, ``node_norms`` (``{node_id: norm}`` with the
ids of ``gradviz.trace``). No Qt here.

The loss is divided by k through the gradient fed to backward (``grad = 1/k``,
times the AMP scale when AMP is on), not by a ``loss / k`` node, so the autograd
graph, and so the node ids, are the same as a trace of the script.
"""
from __future__ import annotations

import logging
import math
import time
from contextlib import nullcontext
from functools import partial
from typing import Any, Callable

import torch
from torch import nn

from gradviz.core.stats.adaptive_clip import AdaptiveClip
from gradviz.core.runtime.random_state import OwnRandomState, seeded
from gradviz.core.runtime.devices import available_devices, resolve_device, to_device
from gradviz.core.train.label_smoothing import LabelSmoothing, id_roots, warn_no_node_norms
from gradviz.core.trace.nodenorms import NodeNormSampler, prepare_inputs
from gradviz.core.script.load import ModelScript, ScriptError, check_loss, error_from_exception, load_script
from gradviz.core.stats.tensors import tensor_stats
from gradviz.core.stats.steps import StepRow, StepStats, loss_value
from gradviz.core.train.options import OPTIMIZERS, SCHEDULES, TrainConfig, check_config, lr_factor, make_optimizer
from gradviz.core.stats.update_cadence import UpdateCadence

log = logging.getLogger(__name__)

__all__ = ["TrainConfig", "Trainer", "StepRow", "NonFiniteLossError", "OPTIMIZERS", "SCHEDULES", "resolve_device",
           "available_devices", "lr_factor"]

class NonFiniteLossError(ScriptError):
    """The loss became NaN or infinite; training stops. ``step`` and ``loss`` say when."""

    def __init__(self, step: int, loss: float, diagnosis: str | None = None,
                 path: str | None = None, line: int | None = None) -> None:
        message = f"step {step}: the loss is {loss} (non-finite); training stopped"
        if diagnosis:
            message += f"\n{diagnosis}"
        super().__init__(message, path=path, line=line, code="nonfinite-loss")
        self.step = step
        self.loss = loss
        self.diagnosis = diagnosis


def _with_step(exc: ScriptError, step: int) -> ScriptError:
    if getattr(exc, "step", None) is not None:
        return exc
    err = ScriptError(f"step {step}: {exc.message}", path=exc.path, line=exc.line, code=exc.code,
                      details=exc.details)
    err.step = step
    return err


class Trainer:
    """Trains ``script``'s model; one ``step()`` at a time or ``run(n)``."""

    def __init__(self, script: ModelScript | str, config: TrainConfig | None = None) -> None:
        self.script = script if isinstance(script, ModelScript) else load_script(script)
        self.config = config or TrainConfig()
        check_config(self.config)
        self.device = resolve_device(self.config.device)
        self.amp = bool(self.config.amp) and self.device.type == "cuda"
        # a node id (e.g. the window's selection) whose full gradient statistics sampled
        # steps report as row.node_detail, so an inspector can follow training
        self.detail_node: str | None = None
        self.reset()

    # -- set-up -----------------------------------------------------------
    def reset(self) -> None:
        """A fresh model and optimizer from the script (seeded), step 0."""
        cfg = self.config
        with seeded(cfg.seed):
            model = self.script.new_model()
            self.random_state = OwnRandomState()    # a trace or replay seeding meanwhile does not change its steps
        model.to(self.device)
        model.train()
        self.model: nn.Module = model
        self.optimizer: torch.optim.Optimizer = make_optimizer(cfg, self.script, model)
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self.stats = StepStats(model.named_parameters(), track_updates=cfg.track_updates)
        self.names = self.stats.names
        self.sampler = NodeNormSampler(model)
        self._all_params = [name for name, _ in model.named_parameters()]
        self.scaler = torch.amp.GradScaler("cuda") if self.amp else None
        self.step_index = 0
        self._last_sample = -math.inf
        self._non_blocking = self.device.type == "cuda"
        self._check_early = self.device.type == "cpu"
        self._on_cpu = self.device.type == "cpu"
        self._loss_where = self.script.loss_site()
        self._ones: dict[tuple, torch.Tensor] = {}
        self._cadence = UpdateCadence(self.config.update_ratio_every)
        self._apply_schedule(0)

    def _apply_schedule(self, step: int) -> None:
        if self.config.schedule == "constant":
            return
        f = lr_factor(self.config, step)
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * f

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"]) if self.optimizer.param_groups else float("nan")

    def _should_sample(self) -> bool:
        cfg = self.config
        if cfg.node_sample_every is not None:
            return cfg.node_sample_every > 0 and self.step_index % cfg.node_sample_every == 0
        if cfg.node_sample_interval_s is None:
            return False
        now = time.perf_counter()
        if now - self._last_sample >= cfg.node_sample_interval_s:
            self._last_sample = now
            return True
        return False

    # -- the step ---------------------------------------------------------
    def batch(self, index: int) -> tuple[tuple, Any]:
        inputs, targets = self.script.get_batch(index)
        if self._on_cpu and isinstance(targets, torch.Tensor) and all(
                isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs) and targets.device.type == "cpu":
            return inputs, targets          # the common CPU case: nothing to move
        nb = self._non_blocking
        return to_device(inputs, self.device, nb), to_device(targets, self.device, nb)

    def _root_grad(self, loss: torch.Tensor, k: int) -> torch.Tensor | None:
        if k == 1 and self.scaler is None:
            return None
        key = (loss.dtype, loss.device, loss.shape)
        base = self._ones.get(key)
        if base is None:
            base = self._ones[key] = torch.full_like(loss, 1.0 / k)
        return self.scaler.scale(base) if self.scaler is not None else base

    def _backward(self, loss: torch.Tensor, grad: torch.Tensor | None) -> None:
        try:
            if grad is None:
                loss.backward()
            else:
                torch.autograd.backward(loss, grad)
        except Exception as exc:
            raise error_from_exception(exc, "backward failed", "backward-error",
                                       self._loss_site()) from None

    def _loss_site(self) -> tuple[str, int] | None:
        path, line = self.script.loss_site()
        return (path, line) if path else None

    def step(self) -> StepRow:
        """One optimizer step; returns its statistics row. Raises ScriptError (with the step)."""
        s = self.step_index
        try:
            with self.random_state.stepping():
                return self._step(s)
        except NonFiniteLossError:
            raise
        except ScriptError as exc:
            raise _with_step(exc, s) from None

    def _step(self, s: int) -> StepRow:
        stats = self.stats
        stats.begin()
        if self.config.zero_grad_every_step:
            self.optimizer.zero_grad(set_to_none=True)
        loss_sum, node_norms = self._forward_backward(s, self._should_sample())
        k = self.config.accumulation
        if self._check_early:
            # on the CPU the value is at hand: stop before the update touches the weights
            loss = loss_value(loss_sum) / k
            if not math.isfinite(loss):
                self._raise_nonfinite(s, loss)
        detail = self._node_detail() if node_norms is not None and self.detail_node else None
        self._optimizer_step(s)
        if not self._check_early:
            loss = loss_value(loss_sum) / k          # (one device sync; the norms stay there)
        row = StepRow(step=s, loss=loss, lr=float(self.optimizer.param_groups[0]["lr"]),
                      step_time=stats.elapsed(), numbers=stats.numbers(), node_detail=detail)
        self._cadence.step_took(row.step_time)
        if not math.isfinite(loss):
            stats.restore_weights()        # the model stays as it was before the bad update
            self._raise_nonfinite(s, loss)
        self.step_index = s + 1
        self._apply_schedule(s + 1)
        if node_norms is not None:
            node_norms.update({f"param:{name}": None for name in self._all_params})
            for name, value, has in zip(self.names, row.param_norms.tolist(), row.has_grad.tolist()):
                node_norms[f"param:{name}"] = value if has else None
            row.node_norms = node_norms
        return row

    def _forward_backward(self, s: int, sample: bool) -> tuple[torch.Tensor, dict | None]:
        """The k micro-batches of step ``s``: (the summed loss, detached when k > 1; node norms
        of the last micro-batch when ``sample``)."""
        cfg = self.config
        k = cfg.accumulation
        node_norms = None
        loss_sum = None
        for j in range(k):
            inputs, targets = self.batch(s * k + j)
            sampled = sample and j == k - 1
            if sampled:
                inputs = prepare_inputs(inputs)
            loss, smoothing = self._loss(inputs, targets)
            grad = self._root_grad(loss, k)
            roots = None if smoothing is None or not sampled else id_roots(loss, smoothing)
            if sampled and (smoothing is None or roots is not None):
                node_norms = self.sampler.sample(loss, partial(self._backward, loss, grad), inputs,
                                                 unscale=grad, params=False, detail=self.detail_node,
                                                 id_roots=roots)
            else:
                if sampled:
                    warn_no_node_norms()
                self._backward(loss, grad)
            if k == 1:
                loss_sum = loss          # its graph is freed by backward; only the value is read
            else:
                detached = loss.detach()
                loss_sum = detached if loss_sum is None else loss_sum + detached
        return loss_sum, node_norms

    def _loss(self, inputs: tuple, targets: Any) -> tuple[torch.Tensor, LabelSmoothing | None]:
        """Forward and loss of one micro-batch (autocast under AMP; label smoothing when asked)."""
        cfg = self.config
        smoothing = LabelSmoothing(cfg.label_smoothing) if cfg.label_smoothing > 0 else None
        # the smoothing mode wraps loss_fn only: a TorchFunctionMode over the forward would cost
        # a Python call per op (a script's own compute_loss is wrapped whole: it holds both)
        with torch.autocast("cuda", dtype=getattr(torch, cfg.amp_dtype)) if self.amp else nullcontext():
            raw = self.script.compute_loss(self.model, inputs, targets, loss_context=smoothing)
        loss = check_loss(raw, *self._loss_where)
        if smoothing is not None and smoothing.calls == 0:
            path, line = self._loss_where
            raise ScriptError(f"label smoothing ({cfg.label_smoothing}) needs a cross-entropy loss "
                              "(nn.CrossEntropyLoss or F.cross_entropy), and the loss called none; "
                              "turn label smoothing off or compute the loss with F.cross_entropy",
                              path=path, line=line, code="label-smoothing-unsupported")
        return loss, smoothing

    def _optimizer_step(self, s: int) -> None:
        """Unscale (AMP), gradient statistics and clipping, the optimizer's step, update ratios."""
        opt, stats = self.optimizer, self.stats
        updates = self._cadence.due(s)
        try:
            if self.scaler is not None:
                self.scaler.unscale_(opt)
            t_u = time.perf_counter()
            cfg = self.config
            adaptive = (None if cfg.adaptive_clip is None else
                        AdaptiveClip(cfg.adaptive_clip, cfg.adaptive_clip_eps, cfg.adaptive_clip_granularity))
            stats.grads_ready(cfg.max_grad_norm, updates, adaptive)
            t_u = time.perf_counter() - t_u - stats.adaptive_seconds    # (the clipping is no ratios' cost)
            if self.scaler is not None:
                self.scaler.step(opt)
                self.scaler.update()
            else:
                opt.step()
        except ScriptError:
            raise                         # (adaptive clipping of sparse gradients)
        except Exception as exc:
            fn = self.script.attr("optimizer")
            raise error_from_exception(exc, "the optimizer step failed", "script-error",
                                       None if fn is None else (fn.__code__.co_filename, fn.__code__.co_firstlineno)
                                       if hasattr(fn, "__code__") else None) from None
        if updates:
            t_a = time.perf_counter()
            stats.after_update()
            self._cadence.update_took(t_u + time.perf_counter() - t_a)

    def _node_detail(self) -> dict | None:
        """Statistics of ``detail_node`` on a sampled step, as the trace would give them."""
        nid = self.detail_node
        if nid.startswith("param:"):
            p = dict(self.model.named_parameters()).get(nid[len("param:"):])
            if p is None:
                return None
            return {"id": nid, "grad": tensor_stats([p.grad]), "value": tensor_stats([p.detach()])}
        last = self.sampler.last_detail
        if last is None or last[0] != nid:
            return None
        return {"id": nid, "grad": last[1], "value": None}

    def _raise_nonfinite(self, s: int, loss: float) -> None:
        diagnosis = None
        hook = self.config.diagnose_nonfinite
        if hook is not None:
            try:
                inputs, targets = self.batch(s * self.config.accumulation)
                diagnosis = hook(self, s, loss, inputs, targets)
            except Exception as exc:          # a failing diagnosis must not hide the error
                diagnosis = f"(diagnosis failed: {type(exc).__name__}: {exc})"
        path, line = self.script.loss_site()
        raise NonFiniteLossError(s, loss, diagnosis, path, line)

    def run(self, n: int, callback: Callable[[StepRow], Any] | None = None) -> StepRow | None:
        """``n`` steps; ``callback(row)`` after each (return False to stop). Returns the last row."""
        row = None
        for _ in range(n):
            row = self.step()
            if callback is not None and callback(row) is False:
                break
        return row

    def evaluate(self) -> dict[str, float]:
        """The script's ``metrics(model)`` (eval mode, no grad); {} when it defines none."""
        fn = self.script.attr("metrics")
        if not callable(fn):
            return {}
        model = self.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                result = fn(model)
        except Exception as exc:
            raise error_from_exception(exc, "metrics() raised", "script-error",
                                       (fn.__code__.co_filename, fn.__code__.co_firstlineno)
                                       if hasattr(fn, "__code__") else None) from None
        finally:
            model.train(was_training)
        if isinstance(result, dict):
            return {str(k): float(v) for k, v in result.items()}
        return {"metric": float(result)}
