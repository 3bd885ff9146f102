"""The diagnosis engine's explanations for what the window meets outside a health check:
a training step whose loss went NaN/inf. No Qt: runs in the training thread.
"""
from __future__ import annotations

import logging
from typing import Any

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
