"""The pieces every finding about a recorded run is made of (``analysis``, ``analysis_ranks``)."""
from __future__ import annotations

import math
from typing import Sequence

from gradviz.core.diagnosis.findings import Finding


def make_finding(code: str, severity: str, message: str, *, params: Sequence[str] = (), nodes: Sequence[str] = (),
             data: dict | None = None) -> Finding:
    params = list(params)
    modules = sorted({p.rpartition(".")[0] for p in params})
    nodes = list(nodes) or [f"param:{p}" for p in params]
    return Finding(code=code, severity=severity, message=message, params=params, modules=modules, nodes=nodes,
                   location=None, edges=[], data=dict(data or {}))


def finding_dict(f: Finding) -> dict:
    return f.to_dict()


def names_text(names: Sequence[str], limit: int = 6) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def json_num(x: float) -> float | str:
    x = float(x)
    return x if math.isfinite(x) else str(x)
