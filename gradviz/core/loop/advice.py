"""The loop findings' texts: what happened, from which step, where, and the reference articles' advice."""
from __future__ import annotations

from typing import Any, Sequence

from gradviz.core.diagnosis.findings import Finding

ADVICE = {
    "grad-not-cleared": "call optimizer.zero_grad() (or model.zero_grad()) as the first line of every iteration "
                        "(000 §5.3 item 5); to accumulate on purpose, zero after each optimizer.step() and divide the "
                        "loss by the number of micro-batches (004 §2.3)",
    "grad-accumulation": "gradients of several backwards are summed before each step: divide each micro-batch's loss "
                         "by their number (loss / K), or the step is K times larger than one batch's (004 §2.3, §4.4)",
    "graph-kept-alive": "keep numbers, not tensors, across steps: total += loss.item() (or loss.detach()) "
                        "(002 §4.4); a tensor with grad_fn keeps its whole graph alive",
    "graph-reused": "detach the carried tensor between steps (hidden = hidden.detach(), as word_language_model's "
                    "repackage_hidden does); retain_graph=True only hides the error while every step backpropagates "
                    "through all earlier ones (004 §4.3)",
    "frozen-but-updated": "freeze first, then build the optimizer over the trainable parameters only "
                          "(filter(lambda p: p.requires_grad, model.parameters())), or set their .grad to None: "
                          "weight decay and momentum move a frozen parameter with a zero gradient (004 §4.4)",
    "not-in-optimizer": "pass these parameters to the optimizer (a layer added or replaced after it was built?), or "
                        "freeze them (requires_grad_(False)) if they are not meant to train",
    "lr-zero": "a learning rate of 0 makes optimizer.step() a no-op: check the schedule (warm-up from 0, a "
               "LambdaLR returning 0) and the lr given",
    "lr-schedule": "call scheduler.step() after optimizer.step() (since PyTorch 1.1): stepped before, the first "
                   "value of the schedule is skipped",
    "loss-flat": "the gradients are healthy but the loss does not fall: check the data and the labels (shuffled "
                 "apart, a constant target, the wrong column) before the model (000 §5.3 item 4)",
    "memory-growing": "something keeps tensors of every step: a loss or output stored with its graph "
                      "(use .item() / .detach()), a list that grows, a graph kept by retain_graph",
    "loop-exception": "the loop ended with this exception: the run holds the steps before it",
}

SEVERITY = {"grad-not-cleared": "error", "graph-reused": "error", "frozen-but-updated": "error",
            "graph-kept-alive": "warning", "not-in-optimizer": "warning", "lr-zero": "warning",
            "lr-schedule": "warning", "loss-flat": "warning", "memory-growing": "warning", "loop-exception": "error",
            "grad-accumulation": "info"}


def loop_finding(code: str, message: str, *, step: int | None, params: Sequence[str] = (),
                 location: str | None = None, data: dict[str, Any] | None = None,
                 severity: str | None = None) -> Finding:
    """A loop finding: ``message`` (what happened), then the step, the user's line and the advice."""
    params = list(params)
    where = f" at {location}" if location else ""
    since = f" (from step {step}{where})" if step is not None else (f" ({location})" if location else "")
    text = f"{message}{since}. Fix: {ADVICE[code]}."
    return Finding(code=code, severity=severity or SEVERITY[code], message=text, params=params,
                   modules=sorted({p.rpartition(".")[0] for p in params if "." in p}),
                   nodes=[f"param:{p}" for p in params], location=location, edges=[],
                   data={"step": step, "advice": ADVICE[code], **(data or {})})


def names(names: Sequence[str], limit: int = 5) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
