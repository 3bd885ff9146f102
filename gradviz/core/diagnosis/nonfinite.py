"""``nan`` / ``inf``: where non-finite values are born.

Forward: the capture records, for every op whose output is non-finite, where that
came from; the birth of what reaches the loss is the first op whose output went
non-finite while its inputs were finite. Backward: a hook on every node finds the
first node that returned non-finite gradients from finite ones (what anomaly mode
names); its origin gives the forward line that created it.

In-place changes of saved tensors are ``inplace.py``'s.
"""
from __future__ import annotations

import os
import re
from typing import Any

import torch

from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding, fmt_params
from gradviz.core.diagnosis.probe import Probe

def _short(location: str | None) -> str:
    if not location:
        return "an unknown line"
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def _origin(probe: Probe, fn: Any):
    return probe.capture.origins.get(fn) if probe.capture is not None and fn is not None else None


def _anomaly_location(fn: Any) -> str | None:
    """file:line from anomaly mode's forward traceback, when the node has one."""
    from gradviz.core.runtime.locations import is_user_file
    try:
        tb = fn.metadata.get("traceback_")
    except (AttributeError, RuntimeError):   # a node without metadata (anomaly mode was off)
        return None
    if not tb:
        return None
    found = None
    for frame in tb if isinstance(tb, list) else [tb]:
        for m in re.finditer(r'File "([^"]+)", line (\d+)', str(frame)):
            if is_user_file(m.group(1)):
                found = f"{m.group(1)}:{m.group(2)}"
    return found


def loss_is_finite(probe: Probe) -> bool:
    loss = probe.loss if probe.loss is not None else probe.raw_loss
    return not isinstance(loss, torch.Tensor) or bool(torch.isfinite(loss.detach()).all())


def forward_findings(probe: Probe, step: int | None = None) -> list[Finding]:
    """A finding when the loss is non-finite: the op where that was born."""
    if loss_is_finite(probe) or probe.capture is None:
        return []
    loss = probe.loss if probe.loss is not None else probe.raw_loss
    birth = probe.capture.nonfinite_origin(loss)
    lv = float(loss.detach().float().sum())
    when = f" at step {step}" if step else ""
    if birth is None:
        kind = "nan" if lv != lv else "inf"
        return [Finding(kind, "error", f"The loss is {lv}{when}, but no op in forward produced the "
                        "non-finite value (was it computed outside the model?).", data={"loss": lv, "step": step})]
    nid = probe.node_id(birth.node)
    src = _source_text(probe, birth)
    masked = _masked_rows(probe, birth)
    advice = masked[1] if masked else _advice(birth.op)
    msg = (f"The loss is {lv}{when}: {src}{masked[0] if masked else ''}. Everything after it, the gradients "
           f"included, is {'NaN' if birth.kind == 'nan' else 'inf/NaN'}. {advice}")
    data = {"loss": lv, "op": birth.op, "count": birth.count, "shape": birth.shape, "step": step,
            "inputs_finite": birth.inputs_finite, "nan_origin": [nid] if nid else [], "stage": "forward",
            "library_location": birth.library or None, "index": birth.index or None,
            "rows": birth.rows or None, "row_count": birth.row_count}
    cause = _cause(probe, birth)
    if cause is not None:
        data.update(mask_op=cause.op, mask_location=cause.location or None, mask_intentional=cause.intentional)
    return [Finding(birth.kind, "error", msg, modules=[birth.module] if birth.module else [],
                    nodes=[nid] if nid else [], location=birth.location or None, data=data)]


def _cause(probe: Probe, birth) -> Any:
    return probe.capture.nonfinite[birth.cause] if birth.cause is not None else None


def _source_text(probe: Probe, birth) -> str:
    what = "NaN" if birth.kind == "nan" else "inf"
    where = (f"`{birth.op}` at {_short(birth.location)}" + (f" (`{birth.code}`)" if birth.code else "")
             + (f" in module `{birth.module}`" if birth.module else ""))
    if birth.cause is not None:
        return f"{where} is the first operation that produced NaN (its input held ±inf, not NaN)"
    if birth.inputs_finite:
        return f"{where} is the first operation whose output is {what} while its inputs were finite"
    bad_in = [f"input {i} of the batch ({int((~torch.isfinite(t)).sum())} values)"
              for i, t in enumerate(probe.inputs)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    bad_p = [n for n, p in probe.model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
    bad_b = [n for n, b in probe.model.named_buffers() if b.is_floating_point() and not bool(torch.isfinite(b).all())]
    whence = "; ".join(x for x in (", ".join(bad_in), ", ".join(f"parameter `{n}`" for n in bad_p[:4]),
                                     ", ".join(f"buffer `{n}`" for n in bad_b[:4])) if x) \
        or "the batch, a parameter or a buffer"
    return (f"non-finite values come in from outside forward ({whence}): "
            f"`{birth.op}` at {_short(birth.location)} is the first operation that sees them")


def _masked_rows(probe: Probe, birth) -> tuple[str, str] | None:
    """A softmax over rows that are entirely -inf: the text naming the rows and the mask, and the advice."""
    if not birth.rows:
        return None
    cause = _cause(probe, birth)
    rows = ", ".join(str(r) for r in birth.rows[:3]) + (" ..." if birth.row_count > 3 else "")
    mask = ""
    if cause is not None:
        mask = (f", every position masked by `{cause.op}` at {_short(cause.location)}"
                + (f" (`{cause.code}`)" if cause.code else "")
                + (", an intentional ±inf fill" if cause.intentional else ""))
    text = (f": {birth.row_count} row(s) of its input have no finite value (row {rows}{mask}), and "
            f"{birth.op} of a row with no finite entry is 0/0 = NaN")
    advice = ("Keep at least one unmasked position per row, fill with torch.finfo(x.dtype).min instead of -inf, "
              "or zero the fully masked rows after the softmax (e.g. weights.masked_fill(all_masked, 0)).")
    return text, advice


def _advice(op: str) -> str:
    if op in ("log", "log_", "log2", "log10"):
        return ("log(0) = -inf: a probability rounded to exactly 0. Use log_softmax / F.cross_entropy (or "
                "F.binary_cross_entropy_with_logits) instead of log(softmax(x)) / log(sigmoid(x)), or clamp "
                "the argument (x.clamp_min(1e-12)); and scale the inputs (e.g. to [0, 1]).")
    if op in ("div", "__truediv__", "div_", "reciprocal", "__rtruediv__"):
        return "A division by zero: add a small epsilon to the denominator or mask the zero entries."
    if op in ("sqrt", "rsqrt", "pow", "__pow__"):
        return "sqrt/pow of a negative number or 0: clamp the argument or add an epsilon."
    if op in ("exp", "exp_", "softmax", "sigmoid"):
        return "exp overflows float32 above ~88: subtract the maximum (logsumexp trick) or normalise the inputs."
    return ("Check that op's inputs (their scale, zeros in denominators, negative arguments of log/sqrt), "
            "normalise the inputs, lower the learning rate; torch.autograd.set_detect_anomaly(True) confirms it.")


def backward_findings(probe: Probe, step: int | None = None) -> list[Finding]:
    """A finding when backward produced non-finite gradients from finite ones."""
    if not probe.backward_births:
        return []
    fn, kind = probe.backward_births[0]
    discarded = _discarded_values(probe, fn)
    if discarded is not None:
        return [_discarded_finding(probe, fn, discarded, step)]
    nid = probe.node_id(fn)
    origin = _origin(probe, fn)
    location = (origin.location if origin is not None and origin.location else None) or _anomaly_location(fn)
    code = origin.code if origin is not None else ""
    module = origin.module if origin is not None else ""
    bad = _bad_grads(probe)
    what = "NaN" if kind == "nan" else "inf"
    when = f" at step {step}" if step else ""
    msg = (f"Backward produced {what} gradients{when} although the loss is finite: `{fn.name()}` is the first "
           f"node that returned {what} from finite gradients; it was created at {_short(location)}"
           + (f" (`{code}`)" if code else "") + ". ")
    if bad:
        msg += f"{fmt_params(bad)} get non-finite gradients. "
    name = fn.name()
    if "Sqrt" in name or "Pow" in name:
        msg += ("The derivative of sqrt (or x**p with p < 1) is infinite at 0: add an epsilon "
                "(torch.sqrt(x + 1e-12)) or clamp the argument.")
    elif "Div" in name:
        msg += "A division by (almost) zero in backward: add an epsilon to the denominator."
    elif "Log" in name:
        msg += "log near 0 has a huge derivative: clamp its argument or use a log-space formulation."
    else:
        msg += "Check that op for zeros, huge values or non-smooth points (anomaly mode names the same node)."
    return [Finding(kind, "error", msg, params=bad, modules=[module] if module else [],
                    nodes=[nid] if nid else [], location=location,
                    data={"node": name, "nan_origin": [nid] if nid else [], "stage": "backward", "step": step})]


def _bad_grads(probe: Probe) -> list[str]:
    return sorted(n for n, g in probe.grads.items() if g is not None and not bool(torch.isfinite(g).all()))


def _discarded_values(probe: Probe, fn: Any):
    """The forward record of non-finite values a later op discarded, that this backward NaN comes from:
    the values ``fn``'s own forward made, or its inputs held."""
    if probe.capture is None:
        return None
    records = [r for r in probe.capture.nonfinite if r.discard is not None]
    inputs = {nxt for nxt, _ in getattr(fn, "next_functions", ()) if nxt is not None}
    return (next((r for r in records if r.node is fn), None)
            or next((r for r in records if r.node is not None and r.node in inputs), None))


# how to make an op's input safe, so the branch a mask throws away stays finite
_SAFE_INPUT = {
    "sqrt": "torch.sqrt(torch.where(mask, x, 1.0)) (or x.clamp_min(eps) where x may be 0 or negative)",
    "rsqrt": "torch.rsqrt(torch.where(mask, x, 1.0))",
    "log": "torch.log(torch.where(mask, x, 1.0)) (or x.clamp_min(1e-12))",
    "log2": "torch.log2(torch.where(mask, x, 1.0))", "log10": "torch.log10(torch.where(mask, x, 1.0))",
    "acos": "torch.acos(x.clamp(-1 + 1e-7, 1 - 1e-7))", "asin": "torch.asin(x.clamp(-1 + 1e-7, 1 - 1e-7))",
    "arccos": "torch.arccos(x.clamp(-1 + 1e-7, 1 - 1e-7))", "arcsin": "torch.arcsin(x.clamp(-1 + 1e-7, 1 - 1e-7))",
    "acosh": "torch.acosh(torch.where(mask, x, 2.0))", "arccosh": "torch.arccosh(torch.where(mask, x, 2.0))",
    "exp": "torch.exp(torch.where(mask, x, 0.0))",
    "div": "a / torch.where(mask, b, 1.0)", "__truediv__": "a / torch.where(mask, b, 1.0)",
    "__rtruediv__": "1 / torch.where(mask, x, 1.0)", "reciprocal": "torch.where(mask, x, 1.0).reciprocal()",
    "pow": "torch.where(mask, x, 1.0) ** p", "__pow__": "torch.where(mask, x, 1.0) ** p",
}


def _discarded_finding(probe: Probe, fn: Any, rec: Any, step: int | None) -> Finding:
    op_name, d_module, d_loc, d_code = rec.discard
    what = "NaN" if rec.kind == "nan" else "±inf"
    when = f" at step {step}" if step else ""
    bad = _bad_grads(probe)
    safe = _SAFE_INPUT.get(rec.op, f"{rec.op}(torch.where(mask, x, <a value where {rec.op} is finite>))")
    msg = (f"Backward produced NaN gradients{when} although the loss is finite: `{rec.op}` at {_short(rec.location)}"
           + (f" (`{rec.code}`)" if rec.code else "")
           + f" made {what} in {rec.count} element(s) that `{op_name}` at {_short(d_loc)}"
           + (f" (`{d_code}`)" if d_code else "")
           + " discards; backward multiplies their gradient by 0, and 0 × " + ("NaN" if rec.kind == "nan" else "inf")
           + f" = NaN (`{fn.name()}` is the first node that returned NaN). "
           + (f"{fmt_params(bad)} get non-finite gradients. " if bad else "")
           + f"Make the discarded branch finite: mask the input before the op, e.g. `x_safe = torch.where(mask, x, "
             f"1.0)` and then `torch.where(mask, {rec.op}(x_safe), other)`; for `{rec.op}`: {safe}. An epsilon after "
             "the op does not help.")
    nid = probe.node_id(rec.node)
    return Finding("nan", "error", msg, params=bad, modules=[rec.module] if rec.module else [],
                   nodes=[nid] if nid else [], location=rec.location or None,
                   data={"node": fn.name(), "stage": "backward", "step": step, "cause": "discarded-nonfinite",
                         "op": rec.op, "count": rec.count, "forward_kind": rec.kind,
                         "discarded_by": op_name, "discard_location": d_loc or None,
                         "library_location": rec.library or None, "nan_origin": [nid] if nid else []})


FORWARD_NONFINITE = Check("non-finite values in forward", ("nan", "inf"), lambda ctx: forward_findings(ctx.probe),
                          needs=("forward",))
BACKWARD_NONFINITE = Check("non-finite gradients", ("nan", "inf"), lambda ctx: backward_findings(ctx.probe),
                           needs=("backward", "finite"))
