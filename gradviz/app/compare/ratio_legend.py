"""The legend of the Compare view's ratio graph: B/A on a log scale, blue - white - red."""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, QSize
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import QWidget

from gradviz.core.output.colors import NAN_RGB, NO_GRAD_RGB
from gradviz.core.record.compare_view import APPEARED_RGB, RATIO_CMAP, VANISHED_RGB
from gradviz.render.primitives import style

BAR_W, BAR_H = 220.0, 12.0
CAPTION = "gradient norm B / A"


def ratio_text(value: float) -> str:
    """×1.54, ×0.999 (a small decrease stays a factor: "÷1" read as no change), ÷12.5."""
    if value >= 0.5:
        return f"×{value:.3g}"
    return f"÷{1 / value:.3g}"


def scale_ticks(limit: float) -> list[float]:
    """The labelled ratios of a scale ÷limit .. ×limit: its ends, ×1, and the decades between."""
    inner = [10.0 ** d for d in range(1, int(math.floor(math.log10(limit) + 1e-9)))] if limit > 10 else []
    return sorted({1 / limit, 1.0, limit, *inner, *(1 / v for v in inner)})


class RatioLegend(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.limit = 10.0

    def set_limit(self, limit: float) -> None:
        self.limit = limit
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(760, 40)

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        text = QColor(style.LIGHT.strong_outline)
        muted = QColor(style.LIGHT.muted_text)
        p.setFont(style.font(11, 500))
        p.setPen(text)
        p.drawText(QPointF(6, 14), CAPTION)
        x = 14 + style.text_width(CAPTION, 11, 500)
        grad = QLinearGradient(x, 0, x + BAR_W, 0)
        for k in range(0, 256, 16):
            grad.setColorAt(k / 255, QColor(*map(int, RATIO_CMAP[k])))
        grad.setColorAt(1.0, QColor(*map(int, RATIO_CMAP[-1])))
        p.setPen(QPen(muted, 0.8))
        p.setBrush(grad)
        p.drawRoundedRect(QRectF(x, 4, BAR_W, BAR_H), 2, 2)
        p.setFont(style.font(10, 400))
        p.setPen(muted)
        for value in scale_ticks(self.limit):
            t = 0.5 + math.log10(value) / (2 * math.log10(self.limit)) if self.limit > 1 else 0.5
            label = ratio_text(value) if value != 1 else "×1"
            w = style.text_width(label, 10, 400)
            p.drawText(QPointF(x + t * BAR_W - w / 2, 4 + BAR_H + 13), label)
        sx = x + BAR_W + 20
        for rgb, label in ((VANISHED_RGB, "vanished"), (APPEARED_RGB, "appeared"), (NAN_RGB, "NaN/Inf in B"),
                           (NO_GRAD_RGB, "no value on a side")):
            p.setPen(QPen(muted, 0.8))
            p.setBrush(QColor(*map(int, rgb)))
            p.drawRoundedRect(QRectF(sx, 4, 16, BAR_H), 2, 2)
            p.setPen(text)
            p.setFont(style.font(11, 400))
            p.drawText(QPointF(sx + 21, 4 + BAR_H - 1), label)
            sx += 21 + style.text_width(label, 11, 400) + 14
        p.end()
