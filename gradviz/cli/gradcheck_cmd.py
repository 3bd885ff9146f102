"""``gradviz gradcheck SCRIPT [--json] [--eps E] [--samples N]``: numerical gradient check.

Central differences in float64 on a copy of the model, per parameter: elements
checked, max absolute and relative error, pass/fail; user autograd.Functions are
checked on the inputs they saw. Exit 1 if any check fails, 2 if the script cannot run.
"""
from __future__ import annotations

import argparse
import json

from gradviz.cli.guard import out
from gradviz.cli.arg_types import integer, real
from gradviz.cli.say import say


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("gradcheck", help="compare autograd with numerical gradients (float64, on a copy)",
                       description="Numerical gradient check: central differences in float64 on a deep copy of "
                                   "the model (dropout off, RNG re-seeded per forward), against autograd.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--eps", type=real(0.0, 1.0), default=1e-6, help="finite-difference step (default 1e-6)")
    p.add_argument("--samples", type=integer(0, 10 ** 9), default=16,
                   help="elements per parameter (all of them when the parameter is smaller; 0 = all)")
    p.add_argument("--atol", type=real(0.0, above=False), default=1e-5)
    p.add_argument("--rtol", type=real(0.0, above=False), default=1e-3)
    p.add_argument("--params", nargs="*", metavar="NAME", help="only these parameters")
    return p


def format_report(script: str, report) -> str:
    rows = [("parameter", "checked", "max abs err", "max rel err", "result")]
    for r in report.params + report.functions:
        res = "pass" if r.passed else f"FAIL ({r.failed})"
        if r.skipped:
            res += f", {r.skipped} kink(s) skipped"
        if r.refined:
            res += f", {r.refined} at a smaller step"
        checked = f"{r.checked}/{r.numel}"
        rows.append((r.name, checked, f"{r.max_abs:.2e}", f"{r.max_rel:.2e}", res))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    out = [f"gradviz gradcheck {script}  (eps={report.eps:g}, atol={report.atol:g}, rtol={report.rtol:g}, "
           f"{report.dtype})"]
    for i, row in enumerate(rows):
        out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)))
        if i == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    for note in report.notes:
        out.append(f"  note: {note}")
    failed = report.failed
    out.append(f"{'OK' if not failed else 'FAILED'}: {len(report.params) + len(report.functions) - len(failed)} "
               f"passed, {len(failed)} failed ({report.seconds:.1f} s)")
    return "\n".join(out)


def run(args) -> int:
    from gradviz.core.diagnosis.gradcheck import gradcheck_script
    from gradviz.core.runtime.errors import ScriptError

    try:
        report = gradcheck_script(args.script, params=args.params or None,
                                  samples=None if args.samples == 0 else args.samples, eps=args.eps,
                                  atol=args.atol, rtol=args.rtol)
    except ScriptError as exc:
        if args.json:
            print(json.dumps({"script": args.script, "ok": False, "error": str(exc), "code": exc.code,
                              "location": exc.location}), file=out())
        else:
            say(f"gradviz gradcheck: {exc}")
        return 2
    except ValueError as exc:
        say(f"gradviz gradcheck: {exc}")
        return 2
    if args.json:
        from gradviz.core.runtime.formatting import json_safe
        print(json.dumps(json_safe({"script": args.script, **report.to_dict()}), indent=2), file=out())
    else:
        print(format_report(getattr(args, "model_name", None) or args.script, report), file=out())
    return 0 if report.ok else 1
