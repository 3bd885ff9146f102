"""Text measurement, owned per thread.

``QFont`` and ``QFontMetricsF`` are reentrant, not thread-safe: the layout worker measures
box labels while the GUI thread paints with its own fonts, so each thread builds and
caches its own metrics objects here (``threading.local``). Only plain floats (widths)
are shared between threads.
"""
from __future__ import annotations

import threading
from functools import lru_cache

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontInfo, QFontMetricsF

from gradviz.render.primitives.qtcompat import ensure_app

FONT_FAMILIES = ["Inter", "Segoe UI", "Helvetica Neue", "Helvetica", "Arial", "Liberation Sans", "DejaVu Sans"]

_local = threading.local()


def make_font(px: int, weight: int = 400) -> QFont:
    """A new font of gradviz's families at ``px`` pixels: same metrics at every zoom and in SVG/PDF."""
    f = QFont()
    f.setFamilies(FONT_FAMILIES)
    f.setPixelSize(px)
    f.setWeight(QFont.Weight(weight))
    f.setHintingPreference(QFont.PreferNoHinting)
    return f


def metrics(px: int, weight: int = 400) -> QFontMetricsF:
    """This thread's metrics of the font (created on first use in each thread)."""
    cache = getattr(_local, "metrics", None)
    if cache is None:
        ensure_app()  # font metrics need a Q(Gui)Application
        cache = _local.metrics = {}
    got = cache.get((px, weight))
    if got is None:
        got = cache[(px, weight)] = QFontMetricsF(make_font(px, weight))
    return got


@lru_cache(maxsize=16384)
def text_width(text: str, px: int, weight: int = 400) -> float:
    """Advance width of ``text``; the float is the same in every thread, so the cache is shared."""
    return metrics(px, weight).horizontalAdvance(text)


# families drawn with the same advance widths (metric-compatible clones): a text measured in one of them
# keeps its width in any other
METRIC_TWINS = (("Liberation Sans", "Arial", "Helvetica", "Arimo", "Nimbus Sans"),)


def measured_families() -> tuple[str, ...]:
    """The family text is measured in on this machine (what Qt resolved ``FONT_FAMILIES`` to), then its
    metric twins, then the rest of ``FONT_FAMILIES``: for a picture read where other fonts are installed."""
    ensure_app()
    found = QFontInfo(make_font(11)).family().split(" [")[0]      # "Nimbus Sans [urw]": without the foundry
    twins = next((group for group in METRIC_TWINS if found in group), ())
    ordered = [found, *twins, *FONT_FAMILIES]
    return tuple(dict.fromkeys(ordered))


def elide(text: str, width: float, px: int, weight: int = 400, mode: Qt.TextElideMode = Qt.ElideRight) -> str:
    return metrics(px, weight).elidedText(text, mode, width)
