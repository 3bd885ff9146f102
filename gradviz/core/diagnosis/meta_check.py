"""``check --meta``: the checklist's structural checks, on the meta device.

With no values, only what the graph's structure says can be checked. The checks that
run are the registry's own (``diagnosis/registry.py``) that declare ``values=False``:
the loss, frozen parameters, reachability (with the call that cut a parameter off, and
parameters reentrant checkpointing reaches in backward), backward errors and in-place
changes. Every check that reads values (NaN/Inf, norms, activations, the numerical
gradient check) is named in a ``structure-only`` finding as not run, never as passed.
"""
from __future__ import annotations

import os
import time
from typing import Any

from torch import nn

from gradviz.core.diagnosis.checklist import CheckReport, check_report
from gradviz.core.diagnosis.findings import Finding, sort_findings
from gradviz.core.diagnosis.loss_checks import script_error_finding
from gradviz.core.diagnosis.registry import CHECKS
from gradviz.core.script.meta import build_meta_model, meta_forward, needs_values_hint
from gradviz.core.script.load import ModelScript, ScriptError, load_script


def structural_check(script: Any, model: nn.Module | None = None, seed: int = 0) -> CheckReport:
    """The registry's structural checks on ``script``'s model built on the meta device."""
    import torch

    start = time.perf_counter()
    try:
        ms = script if isinstance(script, ModelScript) else load_script(script)
        torch.manual_seed(seed)
        model = model if model is not None else build_meta_model(ms)
    except ScriptError as exc:
        path = str(script.path) if isinstance(script, ModelScript) else os.path.abspath(os.fspath(script))
        report = CheckReport(path, findings=[script_error_finding(exc, "setup")])
        report.seconds = time.perf_counter() - start
        return report
    with meta_forward(True):     # factory calls in forward and in a checkpoint's re-run land on meta too
        report = check_report(ms, gradcheck=True, seed=seed, values=False, model=model)
    for f in report.findings:
        if f.code == "script-error":
            f.message = needs_values_hint(f.message)
    if not report.script_error:
        report.findings = sort_findings(report.findings + [_not_run(report.skipped)])
    report.seconds = time.perf_counter() - start
    return report


def _not_run(skipped: list[str]) -> Finding:
    structural = [c.name for c in CHECKS if not c.values]
    return Finding(
        "structure-only", "info",
        f"structure only (meta device): the checks that need no values ({', '.join(structural)}) ran where "
        f"they apply; not run, because they need values: {', '.join(skipped) if skipped else 'none'}.",
        data={"skipped": list(skipped), "structural": structural})
