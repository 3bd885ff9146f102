"""How gradviz writes numbers, tensor shapes and durations as text, everywhere (no Qt).

One number formatter (``number``) and one shape formatter (``shape_text``) serve the
engine's messages, the graph boxes, the panels, the legend and the CLI, so one value
reads the same in every place it appears. ``json_safe`` turns any value gradviz holds
into strict JSON.
"""
from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

__all__ = ["number", "shape_text", "duration", "byte_size", "json_safe", "short_location"]

COMPACT_RANGE = (1e-2, 1e4)  # compact numbers inside this range keep %.4g; outside, 3 significant digits


def number(value: Any, *, compact: bool = False, grouped: bool = False, none: str = "—") -> str:
    """A number as people read it.

    - ``%.4g`` by default: ``0.01235``, ``3.324``, ``1.235e+05``; integers as they are;
    - ``compact=True``: at most 8 characters for narrow places (columns, legend ticks):
      ``0.01235``, ``3.62e-4``, ``-1.23e5``, ``1e-5``;
    - ``grouped=True``: a count with thousands separators: ``11,617``;
    - NaN and infinities spelt ``NaN``, ``Inf``, ``-Inf``; ``None`` (no value) as ``none``.
    """
    if value is None:
        return none
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)) and not grouped:
        return str(int(value))
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    if grouped:
        return f"{int(x):,}"
    lo, hi = COMPACT_RANGE
    if not compact or x == 0 or lo <= abs(x) < hi:
        return "%.4g" % x
    mantissa, exponent = ("%.2e" % x).split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def shape_text(shape: Any, *, style: str = "x", none: str = "") -> str:
    """A tensor shape: ``[64, 128]`` -> ``64×128`` (graph boxes and edges, ``style="x"``) or
    ``(64, 128)`` (``style="tuple"``, the inspector); ``[]`` -> ``scalar``; unknown -> ``none``."""
    if shape is None:
        return none
    if not isinstance(shape, (list, tuple)):
        return str(shape) if style == "tuple" else none
    if not shape:
        return "scalar"
    if style == "tuple":
        return "(" + ", ".join(str(d) for d in shape) + ")"
    return "×".join(str(d) for d in shape)


def duration(seconds: float | None, none: str = "—") -> str:
    """``0.042`` -> ``42 ms``; ``3.5`` -> ``3.50 s``."""
    if seconds is None:
        return none
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def byte_size(n: float | None, none: str = "—") -> str:
    """Memory in binary units: ``1536`` -> ``1.5 KiB``, ``2.8e11`` -> ``262.8 GiB``."""
    if n is None:
        return none
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def json_safe(value: Any) -> Any:
    """``value`` with tuples -> lists, numpy -> Python, non-finite floats -> "nan"/"inf"/"-inf".

    Strict JSON has no NaN/Infinity literals; strings keep the file loadable by any
    parser while still saying what the value was.
    """
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if hasattr(value, "tolist"):  # torch tensors and the like, should one slip in
        return json_safe(value.tolist())
    return str(value)


def short_location(location: str | None) -> str:
    """``/long/path/model.py:12`` -> ``model.py:12`` (a box's second line, a legend); '' for none."""
    if not location:
        return ""
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else location
