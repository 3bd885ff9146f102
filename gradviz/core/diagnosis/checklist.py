"""``check(script, steps=0)``: the articles' checklist, run on a model script.

1. load the script (``script-error``);
2. one instrumented forward and backward on the first batch (``probe.run_probe``);
3. the checks of ``registry.CHECKS``, in order, each when what it needs is there: the loss,
   frozen and unreachable parameters, NaN/inf origins, dead ReLUs, saturated sigmoids,
   in-place errors, layer gradient norms, the numerical gradient check, K training steps.

A step that could not run is a ``check-incomplete`` warning; the report never calls a model
healthy when a step did not run.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gradviz.core.diagnosis.base import CheckOptions, Context
from gradviz.core.diagnosis.findings import Finding, sort_findings
from gradviz.core.diagnosis.loss_checks import script_error_finding
from gradviz.core.diagnosis.numeric import Cancelled
from gradviz.core.diagnosis.probe import run_probe
from gradviz.core.diagnosis.registry import incomplete, run_checks
from gradviz.core.script.load import ModelScript, ScriptError, load_script

log = logging.getLogger(__name__)

GRADCHECK_BUDGET_S = 1.5


@dataclass
class CheckReport:
    script: str
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    training: dict[str, Any] | None = None
    gradcheck: dict[str, Any] | None = None
    cancelled: bool = False
    skipped: list[str] = field(default_factory=list)     # steps not run because values=False
    nodes: int = 0                                        # autograd nodes of the probed graph

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def complete(self) -> bool:
        return not self.cancelled and not any(f.code == "check-incomplete" for f in self.findings)

    @property
    def script_error(self) -> bool:
        return any(f.code == "script-error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"script": self.script, "ok": self.ok, "complete": self.complete, "seconds": round(self.seconds, 3),
                "nodes": self.nodes, "findings": [f.to_dict() for f in self.findings], "skipped": list(self.skipped)}


def check(script: Any, steps: int = 0, *, gradcheck: bool = True, gradcheck_budget: float = GRADCHECK_BUDGET_S,
          seed: int = 0, progress: Callable[[str], None] | None = None,
          cancel: Callable[[], bool] | None = None) -> list[Finding]:
    """Run the checklist on a model script; findings sorted errors first."""
    return check_report(script, steps, gradcheck=gradcheck, gradcheck_budget=gradcheck_budget, seed=seed,
                        progress=progress, cancel=cancel).findings


def check_report(script: Any, steps: int = 0, *, gradcheck: bool = True,
                 gradcheck_budget: float = GRADCHECK_BUDGET_S, seed: int = 0,
                 progress: Callable[[str], None] | None = None,
                 cancel: Callable[[], bool] | None = None, values: bool = True,
                 model: Any = None) -> CheckReport:
    """The checklist with its timings, training history and gradcheck details.

    ``values=False`` runs only the structural checks (``Check.values`` False); ``model``: one
    already built (on the meta device for ``check --meta``: ``core/diagnosis/meta_check.py``)."""
    start = time.perf_counter()
    path = str(script.path) if isinstance(script, ModelScript) else os.path.abspath(os.fspath(script))
    report = CheckReport(path)
    options = CheckOptions(steps=max(0, steps), gradcheck=gradcheck, gradcheck_budget=gradcheck_budget, seed=seed,
                           values=values, cancel=cancel)
    stage = progress or (lambda name: None)
    stage("loading the script")
    try:
        ms = script if isinstance(script, ModelScript) else load_script(script)
    except ScriptError as exc:
        report.findings.append(script_error_finding(exc, "load"))
        return _done(report, start)
    stage("forward and backward")
    t = time.perf_counter()
    try:
        probe = run_probe(ms, seed=seed, model=model, activations=values)   # activations are values
    except ScriptError as exc:
        report.findings.append(script_error_finding(exc, "setup"))
        return _done(report, start)
    except Exception as exc:  # noqa: BLE001 - gradviz's own step failed: say so, never report healthy
        log.warning("the probe could not run", exc_info=True)
        report.findings.append(incomplete("forward and backward", exc))
        return _done(report, start)
    report.timings["probe"] = time.perf_counter() - t
    report.nodes = len(probe.nodes)
    ctx = Context(ms, probe, options)

    def timed_stage(name: str) -> None:
        stage(name)
        report.timings[name] = time.perf_counter()

    try:
        report.skipped = run_checks(ctx, stage=timed_stage)
    except Cancelled:
        report.cancelled = True
    _finish_timings(report)
    report.findings = ctx.findings
    report.training = ctx.extra.get("training")
    report.gradcheck = ctx.extra.get("gradcheck")
    return _done(report, start)


def _finish_timings(report: CheckReport) -> None:
    """Stage start times -> durations (each stage ends where the next one starts)."""
    stamps = sorted((v, k) for k, v in report.timings.items() if k != "probe")
    now = time.perf_counter()
    for (t0, name), nxt in zip(stamps, stamps[1:] + [(now, "")]):
        report.timings[name] = nxt[0] - t0


def _done(report: CheckReport, start: float) -> CheckReport:
    report.findings = sort_findings(report.findings)
    report.seconds = time.perf_counter() - start
    return report
