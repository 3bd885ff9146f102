"""Number and shape formatting shared by the panels (no Qt)."""
from __future__ import annotations

import math
from typing import Any


def num(value: Any) -> str:
    """``%.4g`` for numbers; '—' for None; 'NaN'/'Inf' spelt out."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return "%.4g" % x


def short_num(value: Any) -> str:
    """At most 8 characters, for narrow columns: ``0.01235``, ``3.62e-4``, ``-1.23e5``; else as ``num``."""
    text = num(value)
    try:
        x = abs(float(value))
    except (TypeError, ValueError):
        return text
    if not math.isfinite(x) or x == 0 or 1e-2 <= x < 1e4:
        return text
    mantissa, exponent = ("%.2e" % float(value)).split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent):+d}".replace("e+", "e")


def count(value: Any) -> str:
    """Thousands separators for counts: 11,617."""
    if value is None:
        return "—"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def shape(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ")" if value else "scalar"
    return str(value)


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


ALARM_COLORS = {"light": "#d32f2f", "dark": "#ff6b6b"}   # red text readable on either window colour


def alarm_css(theme: str) -> str:
    """Style sheet for alarming text (errors, NaN/Inf counts) on a 'light' or 'dark' window."""
    return f"color: {ALARM_COLORS.get(theme, ALARM_COLORS['light'])}; font-weight: 600;"
