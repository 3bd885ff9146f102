"""Diagnosis: the articles' checklist as code (no Qt).

``check(script, steps=0) -> list[Finding]`` is the one entry point; ``gradcheck_script``
and ``gradcheck_function`` are the numerical gradient checks. A check is one file here plus one
line in ``registry.CHECKS`` (docs/ARCHITECTURE.md, "Recipe: add a check"); ``meta_check`` runs the
structural checks on the meta device and ``sampled_grads`` keeps the numerical check's memory small.
May import: ``runtime``, ``stats``, ``script``, ``trace``.
"""
from gradviz.core.diagnosis.checklist import CheckReport, check, check_report
from gradviz.core.diagnosis.findings import CODES, Finding, sort_findings
from gradviz.core.diagnosis.gradcheck import GradcheckReport, gradcheck_script
from gradviz.core.diagnosis.loss_checks import finding_from_exception
from gradviz.core.diagnosis.numeric import ParamCheck, gradcheck_function

__all__ = ["check", "check_report", "CheckReport", "Finding", "CODES", "sort_findings", "finding_from_exception",
           "gradcheck_script",
           "gradcheck_function", "GradcheckReport", "ParamCheck"]
