"""The diagnosis panels' background work, as jobs for the window's ``Jobs`` helper: the
checklist (``check_report``) and the numerical gradient check. Both hand the engine the
job's ``CancelToken`` as ``cancel=`` and return plain dicts (findings, per-parameter rows)."""
from __future__ import annotations

from gradviz.app.jobs import JobContext


def check_job(script: str, steps: int = 0):
    """``check_report(script, steps)`` -> its dict; each stage reported as a phase."""
    def job(ctx: JobContext) -> dict:
        from gradviz.core.diagnosis.checklist import check_report

        report = check_report(script, steps=steps, progress=ctx.phase, cancel=ctx.token)
        return report.to_dict()

    return job


def gradcheck_job(script: str, params: list[str] | None, samples: int | None, eps: float):
    """``gradcheck_script`` -> its dict; progress ``(done, total, name)`` as payloads. A
    cancelled check returns its partial rows (``cancelled: True``)."""
    def job(ctx: JobContext) -> dict:
        from gradviz.core.diagnosis.gradcheck import gradcheck_script

        report = gradcheck_script(script, params=params, samples=samples, eps=eps,
                                  progress=lambda done, total, name: ctx.emit((done, total, name)),
                                  cancel=ctx.token)
        return report.to_dict()

    return job
