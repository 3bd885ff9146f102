"""The numerical gradient check as a step of ``check``: ``gradcheck-mismatch`` and when to believe it.

Parameters are checked on a float64 copy (``gradcheck.py``), user autograd.Functions on the
inputs the probe recorded (``numeric.check_custom_call``). Who is blamed follows what is on
the path:

- a user Function that fails its own float64 check: ``error``, blaming its backward;
- parameters that disagree while the computation runs below float64 inside (an upcast to
  float32, a half-precision op): ``gradcheck-inconclusive`` (``info``), never an error;
- parameters that disagree with a user Function on the path: ``error``;
- parameters that disagree with no user Function on the path: ``warning``: torch's own
  backward formulas are not the suspect; a stop-gradient in forward or state gradviz could not
  freeze is.
"""
from __future__ import annotations

from gradviz.core.diagnosis.base import Check, Context
from gradviz.core.diagnosis.customs import unrecorded_functions
from gradviz.core.diagnosis.findings import Finding, fmt_num, fmt_params
from gradviz.core.diagnosis.gradcheck import GradcheckReport, gradcheck_script
from gradviz.core.diagnosis.numeric import Cancelled, ParamCheck, check_custom_call
from gradviz.core.stats.sharding import ShardedModelError, any_dtensor


def _function_checks(ctx: Context) -> list[ParamCheck]:
    funcs: list[ParamCheck] = []
    for call in ctx.probe.capture.custom_calls:
        if any(f.function == call.name for f in funcs):
            continue
        funcs += check_custom_call(call, samples=16, cancel=ctx.options.cancel)
    return funcs


def _drop_gradients(probe) -> None:
    """Free the probe's gradients (as much memory as the model) before the check copies the model
    in float64: every check reading them runs before this one (``registry.CHECKS``)."""
    probe.grads = {}
    if probe.model is not None:
        for p in probe.model.parameters():
            p.grad = None


def gradcheck_findings(ctx: Context) -> list[Finding]:
    probe, opts = ctx.probe, ctx.options
    if any_dtensor(probe.model.parameters()):
        raise ShardedModelError(
            "the numerical gradient check does not run on a sharded model (FSDP2 / DTensor parameters)",
            "It re-runs forward on a float64 copy as often as its time budget allows, and each forward of a "
            "sharded model is a collective that every rank must run in step. Check the same model unsharded, "
            "in one process (the script without fully_shard / parallelize_module).")
    _drop_gradients(probe)
    names = [n for n, p in probe.model.named_parameters() if p.requires_grad and n in probe.reached]
    report = gradcheck_script(ctx.script, params=names, samples=16, budget_s=opts.gradcheck_budget, seed=opts.seed,
                              cancel=opts.cancel, functions=False)
    if report.cancelled:
        raise Cancelled()
    funcs = _function_checks(ctx)
    unrecorded = unrecorded_functions(probe.nodes, probe.capture.custom_calls)
    ctx.extra["gradcheck"] = {**report.to_dict(), "function_checks": [f.to_dict() for f in funcs],
                              "unrecorded_functions": unrecorded}
    bad_params = [p for p in report.params if not p.passed]
    bad_funcs = [f for f in funcs if not f.passed]
    if not bad_params and not bad_funcs:
        return []
    if bad_funcs:
        return [_finding(ctx, report, bad_params, bad_funcs, "error")]
    if not report.conclusive:
        return [_finding(ctx, report, bad_params, [], "info")]
    return [_finding(ctx, report, bad_params, [], "error" if report.functions_on_path else "warning")]


def _param_text(bad: list[ParamCheck]) -> str:
    worst = max(bad, key=lambda p: p.max_rel)
    w = worst.worst or {}
    return (f"autograd's gradient disagrees with the numerical gradient (central differences) for "
            f"{fmt_params([p.name for p in bad])}: e.g. `{worst.name}`[{w.get('index')}] analytic "
            f"{fmt_num(w.get('analytic'))} vs numerical {fmt_num(w.get('numeric'))} (relative error "
            f"{fmt_num(worst.max_rel)})")


def _finding(ctx: Context, report: GradcheckReport, bad_params: list[ParamCheck], bad_funcs: list[ParamCheck],
             severity: str) -> Finding:
    probe = ctx.probe
    names = [p.name for p in bad_params]
    func_names = list(dict.fromkeys(f.function for f in bad_funcs))
    nodes = [probe.node_id(c.node) for c in probe.capture.custom_calls if c.name in func_names]
    nodes = [n for n in dict.fromkeys(nodes) if n] + [f"param:{n}" for n in names]
    parts = [_param_text(bad_params)] if bad_params else []
    code = "gradcheck-mismatch"
    if bad_funcs:
        short = ", ".join(f"`{n.rsplit('.', 1)[-1]}`" for n in func_names)
        parts.append(f"the custom autograd.Function {short} fails its own float64 check on the inputs it saw "
                     f"(relative error {fmt_num(max(f.max_rel for f in bad_funcs))}): its backward does not match "
                     "its forward")
        advice = "Fix that backward formula and re-run gradviz gradcheck."
    elif severity == "info":
        code = "gradcheck-inconclusive"
        advice = (f"Not conclusive: part of the computation runs in {report.lowest_dtype} even on the float64 "
                  f"copy (an upcast inside the model, e.g. a layer norm computed in float32), so differences of "
                  f"this size are expected from rounding; nothing is wrong with the gradients on this evidence.")
    elif report.functions_on_path:
        on = ", ".join(f"`{n.rsplit('.', 1)[-1]}`" for n in report.functions_on_path)
        advice = (f"The custom autograd.Function {on} is on the path: check its backward (it passed on the inputs "
                  "recorded, so look at the inputs it did not see), then re-run gradviz gradcheck.")
    else:
        advice = ("No hand-written backward is on the path, so torch's formulas are not the suspect: look for a "
                  "stop-gradient inside forward (.detach(), .data, torch.no_grad(), a straight-through trick), "
                  "or state that changes between two forward passes that gradviz cannot freeze (a Python "
                  "counter, a cache); BatchNorm/spectral_norm buffers, dropout and the RNG are already frozen.")
    msg = "Gradient check: " + "; ".join(parts) + ". " + advice
    location = bad_funcs[0].location if bad_funcs else None
    return Finding(code, severity, msg, params=names,
                   modules=list(dict.fromkeys(n.rpartition(".")[0] for n in names if "." in n)), nodes=nodes,
                   location=location,
                   data={"params": {p.name: p.to_dict() for p in bad_params},
                         "functions": [f.to_dict() for f in bad_funcs], "notes": report.notes,
                         "lowest_dtype": report.lowest_dtype, "functions_on_path": report.functions_on_path})


GRADCHECK = Check("numerical gradient check", ("gradcheck-mismatch", "gradcheck-inconclusive"), gradcheck_findings,
                  needs=("backward", "finite", "gradcheck"))
