"""The checklist as a registry: the checks ``check`` runs, in order, and the runner.

To add a check: write ``gradviz/core/diagnosis/<name>.py`` with a function
``findings(ctx) -> list[Finding]`` and a ``Check(...)`` declaring its codes and needs (see
``base.py``), add its codes to ``findings.CODES``, and add one line to ``CHECKS`` below.
``order_problems(CHECKS)`` (run by the tests) says when a check reads findings that a later
check gives.

A step that raises inside gradviz (out of memory, a bug) does not stop the others and is
never silent: it becomes a ``check-incomplete`` warning naming the step and the reason.
"""
from __future__ import annotations

import logging
from typing import Callable

from gradviz.core.diagnosis.activations import DEAD_RELU, SATURATED
from gradviz.core.diagnosis.base import Check, Context
from gradviz.core.diagnosis.findings import CODES, Finding
from gradviz.core.diagnosis.gradcheck_check import GRADCHECK
from gradviz.core.diagnosis.loss_checks import BACKWARD_ERROR, LOSS
from gradviz.core.diagnosis.inplace import INPLACE
from gradviz.core.diagnosis.nonfinite import BACKWARD_NONFINITE, FORWARD_NONFINITE
from gradviz.core.diagnosis.norms import NORMS
from gradviz.core.diagnosis.numeric import Cancelled
from gradviz.core.diagnosis.reachability import FROZEN, UNREACHABLE
from gradviz.core.diagnosis.training import TRAINING

log = logging.getLogger(__name__)

CHECKS: list[Check] = [
    LOSS,
    FROZEN,
    UNREACHABLE,
    FORWARD_NONFINITE,
    DEAD_RELU,
    SATURATED,
    INPLACE,
    BACKWARD_ERROR,
    BACKWARD_NONFINITE,
    NORMS,
    GRADCHECK,
    TRAINING,
]


def order_problems(checks: list[Check]) -> list[str]:
    """Where the registry's order contradicts what the checks read.

    A check must come after every check that gives a code it reads. A check that needs
    ``healthy`` (no error so far: the training steps) judges everything before it, so it comes
    after every check that can give an error, and its own findings are read by none before it.
    """
    problems = []
    for i, check in enumerate(checks):
        if "healthy" in check.needs:
            for later in checks[i + 1:]:
                errors = [c for c in later.codes if CODES[c] == "error"]
                if errors:
                    problems.append(f"{check.name!r} needs no error so far, but the later {later.name!r} "
                                    f"gives {errors}")
            continue
        for later in checks[i + 1:]:
            clash = check.all_reads() & set(later.codes) if "healthy" not in later.needs else set()
            if clash:
                problems.append(f"{check.name!r} reads {sorted(clash)}, given by the later {later.name!r}")
    return problems


def incomplete(step: str, exc: BaseException, codes: tuple[str, ...] = ()) -> Finding:
    """The ``check-incomplete`` finding for a step that raised."""
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    text = str(exc).lower()
    oom = isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text
    advice = getattr(exc, "advice", None) or (
        "Free memory (a smaller batch, fewer samples) and run it again."
        if oom else "This is a problem in gradviz or in what the step needs from the script.")
    missing = f" ({', '.join(codes)} not checked)" if codes else ""
    return Finding("check-incomplete", "warning",
                   f"The step \u201c{step}\u201d could not run: {reason}. Its findings{missing} are missing from "
                   f"this report, so it does not say those are healthy. {advice}",
                   data={"step": step, "error": reason, "out_of_memory": oom, "codes": list(codes)})


def _with_library_locations(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """Each finding that highlights an op also says where in library code it was made
    (``data['library_location']``, e.g. transformers/models/bert/modeling_bert.py:NN)."""
    cap = ctx.probe.capture
    if cap is None or not findings:
        return findings
    by_id = {nid: fn for fn, nid in ctx.probe.node_ids.items()}
    for f in findings:
        if f.data.get("library_location"):
            continue
        origin = next((cap.origins.get(by_id.get(n)) for n in f.nodes if by_id.get(n) in cap.origins), None)
        if origin is not None and origin.library:
            f.data["library_location"] = origin.library
    return findings


def run_checks(ctx: Context, checks: list[Check] | None = None,
               stage: Callable[[str], None] | None = None) -> list[str]:
    """Run the checks in order into ``ctx.findings``; returns the names of the steps skipped for
    ``values=False`` (structural runs). Raises Cancelled when the user cancels."""
    skipped = []
    for check in CHECKS if checks is None else checks:
        if ctx.options.cancelled():
            raise Cancelled()
        if not all(ctx.met(n) for n in check.needs):
            continue
        if check.values and not ctx.options.values:
            skipped.append(check.name)
            continue
        if stage is not None:
            stage(check.name)
        try:
            ctx.findings += _with_library_locations(ctx, check.run(ctx))
        except Cancelled:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed step becomes a finding, never a clean bill
            log.warning("check step %r could not run", check.name, exc_info=True)
            ctx.findings.append(incomplete(check.name, exc, check.codes))
    return skipped
