"""``gradviz check SCRIPT [--json] [--steps K]``: the diagnosis checklist on a model script.

Exit status: 2 when the script itself cannot be run (``script-error``); 1 when a finding is
at least as severe as ``--fail-on`` (``error`` by default; ``warning`` also fails on warnings,
``check-incomplete`` included, so CI can gate on them); else 0.
"""
from __future__ import annotations

import argparse
import json

from gradviz.cli.guard import out
from gradviz.cli.arg_types import integer
from gradviz.cli.meta_flag import add_meta_argument, choose_meta
from gradviz.core.runtime.messages import one_line

FINDING_LIMIT = 4000       # characters of one finding's message on the command line
ICONS = {"error": ("✖", "x"), "warning": ("⚠", "!"), "info": ("ℹ", "i")}


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("check", help="run the gradient health checklist on a model script",
                       description="Load the script, run a forward/backward on its first batch and report what "
                                   "is wrong with the gradients: unreachable parameters (and why), in-place "
                                   "errors, NaN/inf origins, exploding/vanishing norms, dead ReLUs, saturated "
                                   "sigmoids, numerical gradient mismatches.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a report")
    p.add_argument("--steps", type=integer(1, 1_000_000), default=None, metavar="K",
                   help="also train K steps with the script's optimizer and watch loss and gradient norm")
    p.add_argument("--no-gradcheck", action="store_true", help="skip the numerical gradient check")
    add_meta_argument(p)
    p.add_argument("--fail-on", choices=("error", "warning"), default="error",
                   help="exit 1 when a finding is at least this severe (default: error)")
    return p


def _icon(severity: str) -> str:
    fancy, plain = ICONS.get(severity, ("?", "?"))
    enc = (getattr(out(), "encoding", None) or "").lower()
    return fancy if "utf" in enc else plain


def exit_status(findings, fail_on: str = "error") -> int:
    from gradviz.core.diagnosis.findings import severity_rank

    if any(f.code == "script-error" for f in findings):
        return 2
    if any(severity_rank(f.severity) <= severity_rank(fail_on) for f in findings):
        return 1
    return 0


def format_report(report, name: str | None = None, gradcheck: bool = True) -> str:
    """``name``: what the user named (a callable's generated script is not it); ``gradcheck``: False under
    --no-gradcheck, so the summary does not call a check that did not run healthy."""
    lines = [f"gradviz check {name or report.script}"]
    if not report.findings and report.complete:
        lines.append("  no problems found: every parameter gets a finite gradient, norms and activations look "
                     "healthy" + (", and so does the numerical gradient check." if gradcheck else
                                  " (the numerical gradient check was not run: --no-gradcheck)."))
    elif not report.complete:
        lines.append("  the check is INCOMPLETE: a step did not run (see below), so this is not a clean bill.")
    for f in report.findings:
        lines.append("")
        lines.append(f"{_icon(f.severity)} {f.severity.upper():7} {f.code}")
        lines.append(f"  {f.message}")
        if f.params:
            shown = ", ".join(f.params[:8]) + (f" (+{len(f.params) - 8} more)" if len(f.params) > 8 else "")
            lines.append(f"  params:   {shown}")
        if f.modules:
            lines.append(f"  modules:  {', '.join(m or '(model)' for m in f.modules[:8])}")
        if f.location:
            lines.append(f"  at:       {f.location}")
        if f.data.get("library_location"):
            lines.append(f"  library:  {f.data['library_location']}")
        if f.edges:
            lines.append(f"  broken:   {', '.join(' -> '.join(e) for e in f.edges)}")
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in ("error", "warning", "info")}
    lines.append("")
    lines.append(f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info "
                 f"({report.seconds:.1f} s)")
    return "\n".join(lines)


def run(args) -> int:
    from gradviz.core.diagnosis.checklist import check_report
    from gradviz.core.script.load import ScriptError, load_script

    try:
        script = load_script(args.script)
    except ScriptError:
        script = None   # check_report reports it as a script-error finding
    choice = choose_meta(args, script, "gradviz check") if script is not None else None
    if choice is not None and choice.meta:
        from gradviz.core.diagnosis.meta_check import structural_check

        report = structural_check(choice.script, choice.model)
    else:
        report = check_report(choice.script if choice is not None else args.script, steps=args.steps or 0,
                              gradcheck=not args.no_gradcheck)
    for f in report.findings:    # text that came from the script (an exception's message) made one clean line
        f.message = one_line(f.message, FINDING_LIMIT)
        f.location = one_line(f.location) if f.location else f.location
    if args.json:
        print(json.dumps(report.to_dict(), indent=2), file=out())
    else:
        print(format_report(report, getattr(args, "model_name", None), gradcheck=not args.no_gradcheck), file=out())
    return exit_status(report.findings, args.fail_on)
