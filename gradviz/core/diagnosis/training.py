"""``check(..., steps=K)``: a short training run with the script's optimizer.

Watches the loss and the global gradient norm at each step: the loss turning NaN/inf
(located with a probe of that step's forward), gradients turning non-finite, or the
gradient norm growing 100x while the loss rises (exploding), or passing 1e4. After the
updates, a ``zero-init`` finding of step 0 is judged again on the trained model: resolved,
or ``vanishing`` if the gradients still do not reach the layers before the zero weight.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from gradviz.core.diagnosis.base import Check, Context
from gradviz.core.runtime.random_state import seeded
from gradviz.core.diagnosis.findings import Finding, fmt_num
from gradviz.core.diagnosis.loss_checks import script_error_finding
from gradviz.core.diagnosis.nonfinite import backward_findings, forward_findings
from gradviz.core.diagnosis.norms import EXPLODE_NORM, global_norm, norm_findings
from gradviz.core.runtime.devices import model_device, to_device
from gradviz.core.diagnosis.probe import run_probe
from gradviz.core.diagnosis.step_reachability import StepWatch, sometimes_unused_findings
from gradviz.core.script.load import ModelScript, ScriptError


def training_findings(script: ModelScript, steps: int, *, seed: int = 0, cancel: Callable[[], bool] | None = None
                      ) -> tuple[list[Finding], dict[str, Any], torch.nn.Module]:
    """K steps; returns the findings, the loss/norm history and the trained model (holding torch's
    generators throughout: a training run on another thread waits, its random stream unchanged)."""
    with seeded(None):
        return _training_findings(script, steps, seed, cancel)


def _training_findings(script: ModelScript, steps: int, seed: int, cancel: Callable[[], bool] | None
                       ) -> tuple[list[Finding], dict[str, Any], torch.nn.Module]:
    _seed_all(seed)      # LayerDrop draws from torch, numpy (transformers' wav2vec2 family) or random
    model = script.new_model()
    opt = script.make_optimizer(model.parameters())
    device = model_device(model)
    losses: list[float] = []
    norms: list[float] = []
    findings: list[Finding] = []
    watch = StepWatch(model)    # which parameters got a gradient on each step (step_reachability.py)
    try:
        _train(script, model, opt, steps, device, losses, norms, findings, watch, cancel)
    finally:
        watch.close()
    data = {"losses": losses, "grad_norms": norms, "steps": len(losses)}
    if not findings:
        findings += sometimes_unused_findings(watch)
    if len(norms) >= 2 and not any(f.severity == "error" for f in findings):
        first = max(norms[0], 1e-12)
        peak = max(norms)
        rising = losses[-1] > losses[0]
        if (peak / first >= 100 and rising) or peak > EXPLODE_NORM:
            at = norms.index(peak)
            msg = (f"Training: the global gradient norm grew from {fmt_num(norms[0])} to {fmt_num(peak)} "
                   f"(step {at}) while the loss went from {fmt_num(losses[0])} to {fmt_num(losses[-1])}: the "
                   "updates are too large and feed on themselves (exploding gradients). Lower the learning "
                   "rate first; then check the init, add normalisation or warm-up. clip_grad_norm_ only "
                   "treats the symptom.")
            findings.append(Finding("exploding", "warning", msg, data={**data, "stage": "training"}))
    return findings, data, model


def _seed_all(seed: int) -> None:
    """The same steps draw the same numbers: torch's, Python's and (when the script uses it) numpy's."""
    import random
    import sys
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed)


def _train(script: ModelScript, model: torch.nn.Module, opt: Any, steps: int, device: Any, losses: list[float],
           norms: list[float], findings: list[Finding], watch: StepWatch, cancel: Callable[[], bool] | None) -> None:
    """The steps; a non-finite loss or gradient stops them, with its finding."""
    for s in range(steps):
        if cancel is not None and cancel():
            break
        watch.begin(s)
        inputs, targets = script.get_batch(s)
        inputs = tuple(to_device(t, device) for t in inputs)
        targets = to_device(targets, device)
        raw = script.compute_loss(model, inputs, targets)
        loss = script.check_loss(raw)
        lv = float(loss.detach().float())
        if not math.isfinite(lv):
            probe = run_probe(script, step=s, model=model, backward=False, activations=False)
            found = forward_findings(probe, step=s) if probe.forward_ok or probe.raw_loss is not None else []
            for f in found:
                hist = ""
                if norms:
                    hist = (f"; the global gradient norm went from {fmt_num(norms[0])} to {fmt_num(max(norms))} "
                            "before that: the updates blew up (lower the learning rate)")
                f.message = (f"Training: the loss became {lv} at step {s} (it was "
                             f"{fmt_num(losses[0]) if losses else 'never finite'} at step 0{hist}). " + f.message)
                f.data.update(losses=losses[-20:], grad_norms=norms[-20:], step=s)
            findings += found or [Finding("nan" if lv != lv else "inf", "error",
                                          f"Training: the loss became {lv} at step {s}.", data={"step": s})]
            losses.append(lv)
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = global_norm(model.parameters())
        losses.append(lv)
        norms.append(gn)
        if not math.isfinite(gn):
            probe = run_probe(script, step=s, model=model, activations=False)
            found = backward_findings(probe, step=s)
            for f in found:
                f.message = f"Training step {s}: " + f.message
            findings += found or [Finding("nan", "error", f"Training: gradients became non-finite at step {s} "
                                          "while the loss was finite.", data={"step": s})]
            break
        watch.after_backward()
        opt.step()


def _rejudge_zero_init(ctx: Context, model: torch.nn.Module, steps: int) -> list[Finding]:
    """After the updates: is the zero weight still cutting the gradients off?"""
    zero = ctx.first("zero-init")
    probe = run_probe(ctx.script, model=model, activations=False)
    if not probe.backward_ok:
        return []
    after = [f for f in norm_findings(probe) if f.code in ("vanishing", "zero-init")]
    if not after or all(f.code == "zero-init" and not f.data.get("exact_zero") for f in after):
        zero.message += (f" Judged again after {steps} update(s): " +
                         ("every layer gets a gradient (resolved)." if not after else
                          "the scale is training and nothing vanishes beyond what it explains."))
        zero.data["resolved_after_steps"] = steps
        return []
    for f in after:
        f.message = f"After {steps} training update(s): " + f.message
        f.data["step"] = steps
        if f.code == "zero-init" and f.data.get("exact_zero"):   # still exactly zero: that weight does not train
            f.code, f.severity = "vanishing", "warning"
            f.message += " The weight is still all zeros after the updates: is it frozen or left out of the optimizer?"
    return after


def training_check(ctx: Context) -> list[Finding]:
    steps = ctx.options.steps
    try:
        found, data, model = training_findings(ctx.script, steps, seed=ctx.options.seed, cancel=ctx.options.cancel)
    except ScriptError as exc:
        return [script_error_finding(exc, "training")]
    ctx.extra["training"] = data
    if ctx.has("zero-init") and data["steps"] == steps and not any(f.severity == "error" for f in found):
        found += _rejudge_zero_init(ctx, model, steps)
    if any(f.code == "sometimes-unused" for f in found):
        # the K steps say on which steps; they replace the one-step finding (a module skipped at random at step 0)
        ctx.findings[:] = [f for f in ctx.findings if not (f.code == "sometimes-unused" and f.data.get("random"))]
    have = {f.code for f in ctx.findings}
    return [f for f in found if f.code not in have]


TRAINING = Check("training steps", ("nan", "inf", "exploding", "vanishing", "sometimes-unused", "script-error"),
                 training_check,
                 needs=("healthy", "steps"), reads=("zero-init",))
