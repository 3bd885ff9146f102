"""The panels' names for the one number and shape formatter (``gradviz.core.runtime.formatting``),
and the style of alarming text (no Qt)."""
from __future__ import annotations

from typing import Any

from gradviz.core.runtime.formatting import duration, number, shape_text

__all__ = ["num", "short_num", "count", "shape", "seconds", "alarm_css"]

num = number            # %.4g; '—' for None; 'NaN'/'Inf' spelt out
seconds = duration      # 42 ms / 3.50 s


def short_num(value: Any) -> str:
    """At most 8 characters, for narrow columns: ``0.01235``, ``3.62e-4``, ``-1.23e5``."""
    return number(value, compact=True)


def count(value: Any) -> str:
    """Thousands separators for counts: 11,617."""
    return number(value, grouped=True)


def shape(value: Any) -> str:
    """``(64, 128)``, ``scalar``, '—' when unknown."""
    return shape_text(value, style="tuple", none="—")


ALARM_COLORS = {"light": "#d32f2f", "dark": "#ff6b6b"}   # red text readable on either window colour


def alarm_css(theme: str) -> str:
    """Style sheet for alarming text (errors, NaN/Inf counts) on a 'light' or 'dark' window."""
    return f"color: {ALARM_COLORS.get(theme, ALARM_COLORS['light'])}; font-weight: 600;"
