"""``check(script, steps=0)``: the articles' checklist, run on a model script.

1. load the script (``script-error``);
2. a forward and backward on the first batch, instrumented (``loss-not-tensor``,
   ``loss-not-scalar``, ``inplace``, ``nan``/``inf`` with the op and line where the
   first non-finite value appeared; ``unreachable`` with the reason per parameter and
   the broken edge, ``frozen``);
3. activations of that batch (``dead-relu``, ``saturated-sigmoid``);
4. per-layer gradient norms (``exploding``, ``vanishing``);
5. a numerical gradient check in float64 on a copy, sampled within a time budget, and
   of every user autograd.Function on its recorded inputs (``gradcheck-mismatch``);
6. with ``steps=K``: K training steps with the script's optimizer, watching the loss and
   the global gradient norm.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from gradviz.core.diagnosis.activations import dead_relu_findings, saturated_findings
from gradviz.core.diagnosis.findings import Finding, fmt_num, fmt_params, sort_findings
from gradviz.core.diagnosis.gradcheck import Cancelled, check_custom_call, gradcheck_script
from gradviz.core.diagnosis.nonfinite import (backward_findings, forward_findings, inplace_findings,
                                              is_inplace_error)
from gradviz.core.diagnosis.norms import norm_findings
from gradviz.core.diagnosis.probe import Probe, run_probe
from gradviz.core.diagnosis.reachability import frozen_findings, unreachable_findings
from gradviz.core.diagnosis.training import training_findings
from gradviz.core.script import ModelScript, ScriptError, error_from_exception, load_script

GRADCHECK_BUDGET_S = 1.5


@dataclass
class CheckReport:
    script: str
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    training: dict[str, Any] | None = None
    gradcheck: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def script_error(self) -> bool:
        return any(f.code == "script-error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"script": self.script, "ok": self.ok, "seconds": round(self.seconds, 3),
                "findings": [f.to_dict() for f in self.findings]}


def check(script: Any, steps: int = 0, *, gradcheck: bool = True, gradcheck_budget: float = GRADCHECK_BUDGET_S,
          seed: int = 0, progress: Callable[[str], None] | None = None,
          cancel: Callable[[], bool] | None = None) -> list[Finding]:
    """Run the checklist on a model script; findings sorted errors first."""
    return check_report(script, steps, gradcheck=gradcheck, gradcheck_budget=gradcheck_budget, seed=seed,
                        progress=progress, cancel=cancel).findings


def check_report(script: Any, steps: int = 0, *, gradcheck: bool = True,
                 gradcheck_budget: float = GRADCHECK_BUDGET_S, seed: int = 0,
                 progress: Callable[[str], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> CheckReport:
    start = time.perf_counter()
    path = str(script.path) if isinstance(script, ModelScript) else os.path.abspath(os.fspath(script))
    report = CheckReport(path)
    findings = report.findings

    def stage(name: str) -> None:
        if progress is not None:
            progress(name)

    def done() -> CheckReport:
        report.findings = sort_findings(findings)
        report.seconds = time.perf_counter() - start
        return report

    stage("loading the script")
    try:
        ms = script if isinstance(script, ModelScript) else load_script(script)
    except ScriptError as exc:
        findings.append(_script_error(exc, "load"))
        return done()

    stage("forward and backward")
    t = time.perf_counter()
    try:
        probe = run_probe(ms, seed=seed)
    except ScriptError as exc:
        findings.append(_script_error(exc, "setup"))
        return done()
    report.timings["probe"] = time.perf_counter() - t

    if probe.error is not None:
        findings += _loss_findings(probe)
        return done()

    # forward facts
    findings += frozen_findings(probe)
    findings += unreachable_findings(probe)
    forward_nonfinite = forward_findings(probe)
    findings += forward_nonfinite
    findings += _activation_findings(probe)

    if probe.backward_error is not None:
        if is_inplace_error(probe.backward_error):
            findings += inplace_findings(probe)
        else:
            findings += _backward_error(probe)
        return done()
    if not forward_nonfinite:
        findings += backward_findings(probe)
    finite = not any(f.code in ("nan", "inf") for f in findings)

    stage("gradient norms")
    if finite:
        findings += norm_findings(probe, skip_zero=any(f.code == "dead-relu" for f in findings))

    if gradcheck and finite and not (cancel is not None and cancel()):
        stage("numerical gradient check")
        t = time.perf_counter()
        findings += _gradcheck_findings(ms, probe, gradcheck_budget, seed, cancel)
        report.timings["gradcheck"] = time.perf_counter() - t

    if steps and steps > 0 and not any(f.severity == "error" for f in findings):
        stage(f"training {steps} steps")
        t = time.perf_counter()
        try:
            found, data = training_findings(ms, steps, seed=seed, cancel=cancel)
            have = {f.code for f in findings}
            findings += [f for f in found if f.code not in have]
            report.training = data
        except ScriptError as exc:
            findings.append(_script_error(exc, "training"))
        report.timings["training"] = time.perf_counter() - t
    return done()


# ---------------------------------------------------------------------------


def _script_error(exc: ScriptError, stage: str) -> Finding:
    what = {"load": "The script cannot be loaded", "setup": "The model or the batch cannot be made",
            "forward": "The forward pass fails", "backward": "The backward pass fails",
            "training": "A training step fails"}.get(stage, "The script fails")
    return Finding("script-error", "error", f"{what}: {exc.message}", location=exc.location,
                   data={"stage": stage, "error_code": exc.code, "details": exc.details[-4000:]})


def _loss_findings(probe: Probe) -> list[Finding]:
    exc = probe.error
    if exc.code == "forward-error":
        return [_script_error(exc, "forward")]
    out = []
    raw = probe.raw_loss
    cap = probe.capture
    if exc.code == "loss-not-tensor":
        if isinstance(raw, torch.Tensor):
            # a tensor without a graph: every parameter is cut off; say why
            out += unreachable_findings(probe)
            out += frozen_findings(probe)
            msg = ("The loss does not require grad: it has no autograd graph, so backward() cannot run and "
                   "nothing trains. " + ("See the unreachable finding(s) for where the graph is cut."
                                         if any(f.code == "unreachable" for f in out) else
                                         "Was the forward run under torch.no_grad(), or every path detached?"))
            out.append(Finding("loss-not-tensor", "error", msg, location=exc.location,
                               data={"type": "Tensor", "requires_grad": False}))
        else:
            item = next((c for c in reversed(cap.cuts) if c.op in ("item", "tolist", "__float__", "numpy")), None) \
                if cap is not None else None
            how = (f"`.{item.op}()` at {_base(item.location)} (`{item.code}`) turned it into a Python "
                   f"{type(raw).__name__}" if item is not None and item.location else
                   f"it is a {type(raw).__name__}")
            msg = (f"The loss is not a tensor: {how}, so the autograd graph is gone and backward() cannot "
                   "run. Return the loss tensor itself; call .item() only when logging.")
            out.append(Finding("loss-not-tensor", "error", msg,
                               location=(item.location if item is not None and item.location else exc.location),
                               data={"type": type(raw).__name__}))
    elif exc.code == "loss-not-scalar":
        shape = list(raw.shape) if isinstance(raw, torch.Tensor) else None
        msg = (f"The loss is not a scalar: it has shape {tuple(shape) if shape else '?'} "
               f"({raw.numel() if isinstance(raw, torch.Tensor) else '?'} elements), and backward() needs a "
               "single number (\"grad can be implicitly created only for scalar outputs\"). Reduce it with "
               ".mean() (or .sum()), or use the loss's default reduction='mean'.")
        out.append(Finding("loss-not-scalar", "error", msg, location=exc.location, data={"shape": shape}))
    else:
        out.append(_script_error(exc, "forward"))
    return out


def _backward_error(probe: Probe) -> list[Finding]:
    exc = probe.backward_error
    fn = probe.last_node
    custom = getattr(fn, "_forward_cls", None) if fn is not None else None
    text = str(exc)
    if custom is not None or "returned an invalid gradient" in text or "returned an incorrect number" in text:
        from gradviz.core.diagnosis.gradcheck import _backward_site
        name = f"{custom.__module__}.{custom.__qualname__}" if custom is not None else (fn.name() if fn else "?")
        nid = probe.node_id(fn)
        loc = _backward_site(custom) if custom is not None else None
        msg = (f"The backward of the custom autograd.Function `{name.rsplit('.', 1)[-1]}` is wrong: "
               f"{text.splitlines()[0]}. backward() must return one gradient per forward input, each with "
               "that input's shape (None for inputs that need none). Check it with gradviz gradcheck "
               "(or torch.autograd.gradcheck in float64).")
        return [Finding("gradcheck-mismatch", "error", msg, nodes=[nid] if nid else [], location=loc,
                        data={"function": name, "error": text.split("Hint:")[0].strip()})]
    err = error_from_exception(exc, "backward failed", "backward-error")
    return [_script_error(err, "backward")]


def _activation_findings(probe: Probe) -> list[Finding]:
    return dead_relu_findings(probe) + saturated_findings(probe)


def _gradcheck_findings(ms: ModelScript, probe: Probe, budget: float, seed: int, cancel) -> list[Finding]:
    try:
        names = [n for n, p in probe.model.named_parameters() if p.requires_grad and n in probe.reached]
        report = gradcheck_script(ms, params=names, samples=16, budget_s=budget, seed=seed, cancel=cancel,
                                  functions=False)
    except (ScriptError, Cancelled, RuntimeError, ValueError):
        return []
    funcs = []
    for call in (probe.capture.custom_calls if probe.capture is not None else []):
        if any(f.function == call.name for f in funcs):
            continue
        try:
            funcs += check_custom_call(call, samples=16, cancel=cancel)
        except Cancelled:
            break
    bad_params = [p for p in report.params if not p.passed]
    bad_funcs = [f for f in funcs if not f.passed]
    if not bad_params and not bad_funcs:
        return []
    names = [p.name for p in bad_params]
    nodes = [f"param:{n}" for n in names]
    func_names = list(dict.fromkeys(f.function for f in bad_funcs))
    for call in probe.capture.custom_calls:
        if call.name in func_names:
            nid = probe.node_id(call.node)
            if nid and nid not in nodes:
                nodes.insert(0, nid)
    parts = []
    if bad_params:
        worst = max(bad_params, key=lambda p: p.max_rel)
        w = worst.worst or {}
        parts.append(f"autograd's gradient disagrees with the numerical gradient (central differences, float64) "
                     f"for {fmt_params(names)}: e.g. `{worst.name}`[{w.get('index')}] analytic "
                     f"{fmt_num(w.get('analytic'))} vs numerical {fmt_num(w.get('numeric'))} (relative error "
                     f"{fmt_num(worst.max_rel)}; healthy is below 1e-4)")
    if bad_funcs:
        short = ", ".join(f"`{n.rsplit('.', 1)[-1]}`" for n in func_names)
        parts.append(f"the custom autograd.Function {short} fails its own check on the inputs it saw "
                     f"(relative error {fmt_num(max(f.max_rel for f in bad_funcs))}): its backward does not "
                     "match its forward")
    elif any(getattr(probe.capture, "custom_calls", [])):
        pass
    msg = ("Gradient check failed: " + "; ".join(parts) + ". A hand-written backward (custom autograd.Function) "
           "or a non-differentiable trick in forward is the usual cause: fix the backward formula and re-run "
           "gradviz gradcheck.")
    location = bad_funcs[0].location if bad_funcs else None
    return [Finding("gradcheck-mismatch", "error", msg, params=names,
                    modules=list(dict.fromkeys(n.rpartition(".")[0] for n in names if "." in n)), nodes=nodes,
                    location=location,
                    data={"params": {p.name: p.to_dict() for p in bad_params},
                          "functions": [f.to_dict() for f in bad_funcs], "notes": report.notes})]


def _base(location: str | None) -> str:
    if not location:
        return "?"
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"
