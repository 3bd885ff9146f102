"""The four colours of every node box (fill, text, second line, header band), from one RGB per node.

Kept apart from the scene because the rules are a small policy of their own: the scale's colour
for each value, the "no gradient" look for unreachable parameters whatever their value, and red
for the call that raised. One ``QColor`` set per distinct RGB: a 10k-node graph has a few hundred.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from PySide6.QtGui import QColor

from gradviz.core.output.colors import text_color_for
from gradviz.render.parts.node_paint import darker, secondary_text


class NodeColors:
    """Parallel lists indexed like the scene's nodes."""

    def __init__(self, rgb: Iterable[Sequence[int]], reachable: Sequence[bool], failed: Iterable[int],
                 no_gradient: QColor, broken: QColor) -> None:
        cache: dict[tuple, tuple] = {}
        self.fills: list[QColor] = []
        self.texts: list[QColor] = []
        self.seconds: list[QColor] = []
        self.headers: list[QColor] = []
        for r, g, b in rgb:
            key = (r, g, b)
            got = cache.get(key)
            if got is None:
                fill = QColor(r, g, b)
                text = QColor(*text_color_for(key))
                got = cache[key] = (fill, text, secondary_text(text), darker(fill, 0.16))
            self.fills.append(got[0])
            self.texts.append(got[1])
            self.seconds.append(got[2])
            self.headers.append(got[3])
        for i, ok in enumerate(reachable):
            if not ok:  # unreachable parameters: always the "no gradient" look
                self.fills[i] = no_gradient
        for i in failed:  # the call that raised: red, whatever the scale
            self.fills[i] = self.headers[i] = broken
            self.texts[i] = self.seconds[i] = QColor("#ffffff")
