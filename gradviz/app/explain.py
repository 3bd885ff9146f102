"""The diagnosis engine's explanations for what the window meets outside a health check: a
script that fails to open (in-place, shapes...), a traced loss that is NaN/inf, a training
step whose loss went NaN/inf. They say what ``gradviz check`` says, naming the same op and
line. No Qt: they run in the trace and training threads.
"""
from __future__ import annotations

import logging
from typing import Any

from gradviz.core.runtime.errors import ScriptError

log = logging.getLogger(__name__)


def explain_nonfinite(trainer: Any, step: int, loss: float, inputs: Any = None, targets: Any = None) -> str | None:
    """``TrainConfig.diagnose_nonfinite``: where the non-finite loss of ``step`` was born, in the
    words of ``gradviz check`` (its ``nan``/``inf`` finding), from a probe of that step's
    forward on the trained model; None when the probe finds nothing to add."""
    from gradviz.core.diagnosis.nonfinite import forward_findings
    from gradviz.core.diagnosis.probe import run_probe

    batch = step * max(1, trainer.config.accumulation)
    probe = run_probe(trainer.script, step=batch, model=trainer.model, backward=False, activations=False)
    findings = forward_findings(probe, step=step)
    if not findings:
        return None
    f = findings[0]
    where = f" ({f.location})" if f.location else ""
    return f"{f.message}{where}"


class DiagnosedError(ScriptError):
    """A script that could not be opened, explained as ``gradviz check`` explains it: the
    finding's message and ``file:line`` (e.g. the in-place call, not the ``loss_fn`` line
    torch's error points at); ``report`` is the whole check report, for the Diagnosis panel."""

    def __init__(self, finding: dict, report: dict, cause: BaseException) -> None:
        path, _, line = (finding.get("location") or "").rpartition(":")
        details = getattr(cause, "details", "") or ""
        super().__init__(finding["message"], path=path or None, line=int(line) if line.isdigit() else None,
                         code=finding["code"], details=f"{type(cause).__name__}: {cause}\n\n{details}".rstrip())
        self.report = report
        # the innermost library frame (transformers' modeling file) beside the user's line, as check says it
        self.library_location: str | None = (finding.get("data") or {}).get("library_location")


def explain_open_error(path: str, error: BaseException, cancel=None) -> DiagnosedError:
    """What the window shows when a script fails to open: the finding ``gradviz check`` gives.
    The checklist runs (one probe) because only a probe names what torch's error does not: the
    in-place call that overwrote a saved tensor, the op where a NaN was born. When it finds
    nothing more than the error itself, ``finding_from_exception`` words it as check does."""
    from gradviz.core.diagnosis import check_report, finding_from_exception

    report = check_report(path, gradcheck=False, cancel=cancel).to_dict()
    errors = [f for f in report["findings"] if f["severity"] == "error" and f["code"] != "script-error"]
    if errors:
        return DiagnosedError(errors[0], report, error)
    code = getattr(error, "code", "")
    stage = code.split("-")[0] if code in ("forward-error", "backward-error") else "forward"
    return DiagnosedError(finding_from_exception(error, stage).to_dict(), report, error)


def explain_nonfinite_trace(path: str, graph: Any, cancel=None) -> dict | None:
    """The check report of a script whose traced loss (or a gradient) is NaN/inf, so the window
    says where it came from as ``gradviz check`` does; None when everything is finite."""
    import math

    from gradviz.core.diagnosis.checklist import check_report

    loss = graph.graph.get("loss")
    bad_loss = isinstance(loss, float) and not math.isfinite(loss)
    bad_grads = any(a.get("grad_nan") or a.get("grad_inf") for _, a in graph.nodes(data=True))
    if not (bad_loss or bad_grads):
        return None
    return check_report(path, gradcheck=False, cancel=cancel).to_dict()
