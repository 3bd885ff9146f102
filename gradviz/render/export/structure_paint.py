"""The legend row of a structure-only graph: what each colour stands for
(``core/output/structure_colors.py``), in the space the gradient colour bar takes otherwise."""
from __future__ import annotations

from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QPainter

from gradviz.core.output.structure_colors import StructureColors
from gradviz.render.export.swatch import paint_swatch
from gradviz.render.primitives import style


def paint_structure_row(painter: QPainter, x: float, y: float, structure: StructureColors, theme: style.Theme,
                        width: float, swatch_h: float = 12.0) -> None:
    """Caption on the first line, then as many category swatches as fit in ``width`` (two lines)."""
    muted = QColor(theme.muted_text)
    painter.setFont(style.font(11, 500))
    painter.setPen(QColor(theme.strong_outline))
    painter.drawText(QPointF(x, y + swatch_h - 1), structure.caption)
    entries = structure.entries()
    sx, sy = x + style.text_width(structure.caption, 11, 500) + 14, y
    shown = 0
    for rgb, label in entries:
        w = 23 + style.text_width(label, 11, 400) + 14
        if sx + w > x + width:
            if sy > y:             # second line full: say how many are left
                break
            sx, sy = x, y + swatch_h + 8
        paint_swatch(painter, sx, sy, rgb, label, theme)
        sx += w
        shown += 1
    if shown < len(entries):
        painter.setPen(muted)
        painter.setFont(style.font(10, 400))
        painter.drawText(QPointF(sx, sy + swatch_h - 1), f"+{len(entries) - shown} more")
