"""The loss and backward checks: the forward gave no usable loss, or backward raised.

``loss-not-tensor`` (a Python number, or a tensor without a graph, with the cut that made
it), ``loss-not-scalar``, ``script-error`` for forward/backward raising, and a wrong
custom backward (``gradcheck-mismatch``) when backward raised inside a user Function.
"""
from __future__ import annotations

import os

import torch

from gradviz.core.diagnosis.base import Check, Context
from gradviz.core.diagnosis.findings import Finding
from gradviz.core.diagnosis.inplace import is_inplace_error
from gradviz.core.diagnosis.numeric import backward_site
from gradviz.core.diagnosis.reachability import unreachable_findings
from gradviz.core.script.load import ScriptError, error_from_exception


def script_error_finding(exc: ScriptError, stage: str) -> Finding:
    """A ``script-error`` finding for a ScriptError met at ``stage`` (load, setup, forward, ...)."""
    what = {"load": "The script cannot be loaded", "setup": "The model or the batch cannot be made",
            "forward": "The forward pass fails", "backward": "The backward pass fails",
            "training": "A training step fails"}.get(stage, "The script fails")
    return Finding("script-error", "error", f"{what}: {exc.message}", location=exc.location,
                   data={"stage": stage, "error_code": exc.code, "details": exc.details[-4000:]})


def finding_from_exception(exc: BaseException, stage: str = "forward") -> Finding:
    """The finding ``check`` would give for an exception met at ``stage`` (load, setup, forward,
    backward, training), e.g. one the window met while tracing: a ScriptError as it is, anything
    else pointed at the user's innermost line."""
    if not isinstance(exc, ScriptError):
        exc = error_from_exception(exc, f"{stage} failed", f"{stage}-error")
    return script_error_finding(exc, stage)


def loss_findings(ctx: Context) -> list[Finding]:
    """Why the forward gave no usable loss: it raised, or the loss is not a scalar tensor with a graph."""
    probe = ctx.probe
    exc = probe.error
    if exc is None:
        return []
    if exc.code == "forward-error":
        return [script_error_finding(exc, "forward")]
    out = []
    raw = probe.raw_loss
    cap = probe.capture
    if exc.code == "loss-not-tensor":
        if isinstance(raw, torch.Tensor):
            # a tensor without a graph: every parameter is cut off; say why
            out += unreachable_findings(probe)
            msg = ("The loss does not require grad: it has no autograd graph, so backward() cannot run and "
                   "nothing trains. " + ("See the unreachable finding(s) for where the graph is cut."
                                         if any(f.code == "unreachable" for f in out) else
                                         "Was the forward run under torch.no_grad(), or every path detached?"))
            out.append(Finding("loss-not-tensor", "error", msg, location=exc.location,
                               data={"type": "Tensor", "requires_grad": False}))
        else:
            item = next((c for c in reversed(cap.cuts) if c.op in ("item", "tolist", "__float__", "numpy")), None) \
                if cap is not None else None
            how = (f"`.{item.op}()` at {_base(item.location)} (`{item.code}`) turned it into a Python "
                   f"{type(raw).__name__}" if item is not None and item.location else
                   f"it is a {type(raw).__name__}")
            msg = (f"The loss is not a tensor: {how}, so the autograd graph is gone and backward() cannot "
                   "run. Return the loss tensor itself; call .item() only when logging.")
            out.append(Finding("loss-not-tensor", "error", msg,
                               location=(item.location if item is not None and item.location else exc.location),
                               data={"type": type(raw).__name__}))
    elif exc.code == "loss-not-scalar":
        shape = list(raw.shape) if isinstance(raw, torch.Tensor) else None
        msg = (f"The loss is not a scalar: it has shape {tuple(shape) if shape else '?'} "
               f"({raw.numel() if isinstance(raw, torch.Tensor) else '?'} elements), and backward() needs a "
               "single number (\"grad can be implicitly created only for scalar outputs\"). Reduce it with "
               ".mean() (or .sum()), or use the loss's default reduction='mean'.")
        out.append(Finding("loss-not-scalar", "error", msg, location=exc.location, data={"shape": shape}))
    else:
        out.append(script_error_finding(exc, "forward"))
    return out


def backward_error_findings(ctx: Context) -> list[Finding]:
    """backward() raised, and not for an in-place change (``inplace`` explains those)."""
    probe = ctx.probe
    exc = probe.backward_error
    if is_inplace_error(exc):
        return []
    fn = probe.last_node
    custom = getattr(fn, "_forward_cls", None) if fn is not None else None
    text = str(exc)
    if custom is not None or "returned an invalid gradient" in text or "returned an incorrect number" in text:
        name = f"{custom.__module__}.{custom.__qualname__}" if custom is not None else (fn.name() if fn else "?")
        nid = probe.node_id(fn)
        loc = backward_site(custom) if custom is not None else None
        msg = (f"The backward of the custom autograd.Function `{name.rsplit('.', 1)[-1]}` is wrong: "
               f"{text.splitlines()[0]}. backward() must return one gradient per forward input, each with "
               "that input's shape (None for inputs that need none). Check it with gradviz gradcheck "
               "(or torch.autograd.gradcheck in float64).")
        return [Finding("gradcheck-mismatch", "error", msg, nodes=[nid] if nid else [], location=loc,
                        data={"function": name, "error": text.split("Hint:")[0].strip()})]
    err = error_from_exception(exc, "backward failed", "backward-error")
    return [script_error_finding(err, "backward")]


def _base(location: str | None) -> str:
    if not location:
        return "?"
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


LOSS = Check("the loss", ("script-error", "loss-not-tensor", "loss-not-scalar", "unreachable"), loss_findings,
             needs=("forward-failed",), values=False)
BACKWARD_ERROR = Check("backward", ("gradcheck-mismatch", "script-error"), backward_error_findings,
                       needs=("backward-failed",), values=False)
