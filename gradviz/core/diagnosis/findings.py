"""The ``Finding``: one thing ``check`` found wrong (or worth knowing) about a model script."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gradviz.core.runtime.formatting import json_safe, number

SEVERITIES = ("error", "warning", "info")

# code -> default severity; the order is the order of the checklist
CODES: dict[str, str] = {
    "script-error": "error",        # cannot load / run the script (also forward or backward raising)
    "check-incomplete": "warning",  # a step of the check could not run (out of memory, an error in gradviz)
    "loss-not-tensor": "error",
    "loss-not-scalar": "error",
    "inplace": "error",
    "nan": "error",
    "inf": "error",
    "unreachable": "error",
    "gradcheck-mismatch": "error",  # warning when no user autograd.Function is on the path
    "exploding": "warning",
    "vanishing": "warning",
    "sometimes-unused": "warning",   # parameters without gradient on some training steps only (LayerDrop)
    "dead-relu": "warning",
    "saturated-sigmoid": "warning",
    "frozen": "info",
    "zero-init": "info",            # an all-zero weight (by design) zeroes the gradients before it at step 0
    "gradcheck-inconclusive": "info",   # a mismatch where the computation runs below float64 inside
}


@dataclass
class Finding:
    """What is wrong, why it matters and what to do, with what to highlight.

    ``params``: qualified parameter names; ``modules``: module paths; ``nodes``: graph
    node ids to select (``param:fc1.weight``, ``op:12``); ``edges``: broken edges
    ``[u, v]`` to draw red dashed; ``location``: ``file:line`` in user code or None;
    ``data``: extra numbers (norms, fractions, errors).
    """

    code: str
    severity: str
    message: str
    params: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    location: str | None = None
    edges: list[list[str]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    @property
    def title(self) -> str:
        return self.message.split("\n", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (non-finite numbers become the strings 'nan', 'inf', '-inf')."""
        return json_safe(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        keys = ("code", "severity", "message", "params", "modules", "nodes", "location", "edges", "data")
        return cls(**{k: d[k] for k in keys if k in d})


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; the checklist's order within each."""
    order = list(CODES)
    return sorted(findings, key=lambda f: (severity_rank(f.severity),
                                           order.index(f.code) if f.code in order else len(order)))


def fmt_params(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def fmt_num(x: float | None) -> str:
    """Numbers in messages: the one number formatter (``core.formatting.number``), compact."""
    return number(x, compact=True, none="none")
