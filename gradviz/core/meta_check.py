"""``check --meta``: the structural checks of the checklist, on the meta device.

With no values, only what the graph's structure says can be checked: parameters the
loss does not reach (and the call that cut them off) and frozen parameters. Every check
that reads values (NaN/Inf, norms, activations, the numerical gradient check) is
reported as not run, never as passed.
"""
from __future__ import annotations

import os
import time
from typing import Any

from torch import nn

from gradviz.core.diagnosis.checklist import CheckReport
from gradviz.core.diagnosis.findings import Finding, sort_findings
from gradviz.core.diagnosis.probe import run_probe
from gradviz.core.diagnosis.reachability import frozen_findings, unreachable_findings
from gradviz.core.meta import build_meta_model, meta_forward
from gradviz.core.script import ModelScript, ScriptError, load_script

SKIPPED = ("NaN/Inf origins, in-place errors in backward, gradient norms (exploding/vanishing), dead ReLUs, "
           "saturated sigmoids and the numerical gradient check")


def structural_check(script: Any, model: nn.Module | None = None, seed: int = 0) -> CheckReport:
    """Reachability and frozen parameters of ``script``'s model built on the meta device."""
    import torch

    start = time.perf_counter()
    path = str(script.path) if isinstance(script, ModelScript) else os.path.abspath(os.fspath(script))
    report = CheckReport(path)
    try:
        ms = script if isinstance(script, ModelScript) else load_script(script)
        torch.manual_seed(seed)
        model = model if model is not None else build_meta_model(ms)
        with meta_forward(True):
            probe = run_probe(ms, seed=None, model=model, backward=False, activations=False)
    except ScriptError as exc:
        report.findings = [Finding("script-error", "error", str(exc), location=exc.location,
                                   data={"error_code": exc.code})]
        report.seconds = time.perf_counter() - start
        return report
    findings: list[Finding] = []
    if probe.error is not None:
        findings.append(Finding(probe.error.code if probe.error.code.startswith("loss-") else "script-error",
                                "error", str(probe.error), location=probe.error.location))
    else:
        findings += frozen_findings(probe)
        findings += unreachable_findings(probe)
    findings.append(Finding(
        "structure-only", "info",
        f"structure only (meta device): checked which parameters the loss reaches and which are frozen; "
        f"not run, because they need values: {SKIPPED}.",
        data={"skipped": SKIPPED}))
    report.findings = sort_findings(findings)
    report.seconds = time.perf_counter() - start
    return report
