"""A colour swatch with its label: the legend's NaN / Inf / no-gradient entries beside the colour bar,
and the categories of a structure-only graph (``structure_paint``) in the bar's place."""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QColor, QPainter, QPen

from gradviz.render.primitives import style

SWATCH_H = 12.0   # as tall as the legend's colour bar (legend.BAR_H)


def paint_swatch(painter: QPainter, x: float, y: float, rgb, label: str, theme: style.Theme) -> float:
    """A colour swatch and its label at (x, y); returns the x where the label ends."""
    painter.setPen(QPen(QColor(theme.muted_text), 0.8))
    painter.setBrush(QColor(*rgb))
    painter.drawRoundedRect(QRectF(x, y, 18, SWATCH_H), 2, 2)
    painter.setPen(QColor(theme.strong_outline))
    painter.setFont(style.font(11, 400))
    painter.drawText(QPointF(x + 23, y + SWATCH_H - 1), label)
    return x + 23 + style.text_width(label, 11, 400)
