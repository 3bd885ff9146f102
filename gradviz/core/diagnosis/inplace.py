"""``inplace``: the writes that changed a tensor autograd had saved, named from version counters.

When backward raises "modified by an inplace operation: [shape], which is output k of X, is at
version V; expected version E", the node being run (``probe.last_node``) saved a tensor at
version E, and V - E writes to its storage followed. The capture's ``InplaceWatch`` knows every
write with the version it left and what each node's forward call took and made: the writes
blamed are those to that storage after the save with versions E+1..V, in order. A write before
the save (an ``inplace=True`` ReLU that made the tensor) is never blamed.
"""
from __future__ import annotations

import re
from typing import Any

from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding
from gradviz.core.diagnosis.nonfinite import _anomaly_location, _origin, _short
from gradviz.core.diagnosis.probe import Probe

INPLACE_RE = re.compile(r"modified by an inplace operation: \[([^\]]*?)\s*(\[[^\]]*\])?\], which is output "
                        r"(\d+) of (\w+), is at version (\d+); expected version (\d+)")


def is_inplace_error(exc: BaseException | None) -> bool:
    return exc is not None and "modified by an inplace operation" in str(exc)


def _parse(text: str) -> tuple[list[int] | None, int | None, int | None, str | None]:
    """(shape, version now, version saved, the node that made the tensor) from torch's message."""
    m = INPLACE_RE.search(text)
    if not m:
        return None, None, None, None
    shape = [int(v) for v in re.findall(r"\d+", m.group(2) or "")] if m.group(2) else None
    return shape, int(m.group(5)), int(m.group(6)), m.group(4)


def _write_text(w: Any) -> str:
    return f"`{w.op}` at {_short(w.location)}" + (f" (`{w.code}`)" if w.code else "")


def _made_at(probe: Probe, saved: Any) -> str | None:
    origin = _origin(probe, saved.maker) if saved is not None else None
    return origin.location or None if origin is not None else None


def inplace_findings(probe: Probe) -> list[Finding]:
    exc = probe.backward_error
    if not is_inplace_error(exc) or probe.capture is None:
        return []
    text = str(exc)
    shape, version, expected, maker = _parse(text)
    cap = probe.capture
    saver = probe.last_node
    s_origin = _origin(probe, saver)
    s_loc = (s_origin.location if s_origin is not None and s_origin.location else None) or \
        (_anomaly_location(saver) if saver is not None else None)
    saved, writes = cap.writes.culprits(shape, version, expected, cap.node_seq.get(saver))
    call = s_origin.call if s_origin is not None and s_origin.call else (saver.name() if saver else "?")
    code = s_origin.code if s_origin is not None else ""
    custom = next((c for c in cap.custom_calls if saver is not None and c.node is saver), None)
    if custom is not None:    # a user autograd.Function saved it (ctx.save_for_backward): its call, not a later op's
        call, s_loc, code = f"{custom.cls.__name__}.apply", custom.location or s_loc, custom.code
    saver_text = f"`{call}` at {_short(s_loc)}" + (f" (`{code}`)" if code else "")
    what = f"a tensor of shape {shape}" if shape is not None else "a tensor"
    if writes:
        first = writes[0]
        more = (f", then {len(writes) - 1} more write(s) to the same storage ("
                + ", ".join(_write_text(w) for w in writes[1:4]) + (" ..." if len(writes) > 4 else "") + ")"
                if len(writes) > 1 else "")
        msg = (f"{_write_text(first)}{more} changed in place {what} that {saver_text} had saved for backward "
               f"(saved at version {expected}, version {version} when backward needed it), so backward fails with "
               "\"one of the variables needed for gradient computation has been modified by an inplace operation\". "
               "Clone the tensor before the write (`out = x.clone()`), or compute the result out of place "
               "(`y = y * 2` instead of `y.mul_(2)`, `torch.cat`/`torch.where` instead of slice assignment, "
               "`inplace=False`).")
    else:
        msg = (f"An in-place operation changed {what} that {saver_text} had saved for backward, but no write to it "
               "was seen in forward (it was made outside the captured forward?). Clone the tensor before changing "
               "it, or change it out of place.")
    nid = probe.node_id(saver)
    modules = list(dict.fromkeys(m for m in ([w.module for w in writes[:1]]
                                             + [s_origin.module if s_origin is not None else ""]) if m))
    return [Finding("inplace", "error", msg, modules=modules, nodes=[nid] if nid else [],
                    location=(writes[0].location if writes and writes[0].location else None) or s_loc,
                    data={"inplace_call": writes[0].op if writes else None,
                          "inplace_location": writes[0].location if writes else None,
                          "writes": [{"op": w.op, "location": w.location or None, "library": w.library or None,
                                      "version": w.version, "module": w.module} for w in writes],
                          "library_location": (writes[0].library if writes else "") or None,
                          "saved_by": saver.name() if saver is not None else None,
                          "saved_by_location": s_loc,
                          "saved_version": expected, "version": version,
                          "created_by": (saved.maker.name() if saved is not None and saved.maker is not None
                                         else maker),
                          "created_at": _made_at(probe, saved),
                          "error": text.split("Hint:")[0].strip()})]


INPLACE = Check("in-place changes", ("inplace",), lambda ctx: inplace_findings(ctx.probe),
                needs=("backward-failed",), values=False)
