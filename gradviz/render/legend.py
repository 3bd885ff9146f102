"""The colour legend: a log colour bar with decade ticks, NaN/Inf and "no gradient"
swatches, and a key of node shapes. ``paint_legend`` draws it with any QPainter (image
export puts it above the graph); ``ColorBarWidget`` shows the same drawing as an
overlay in the window.
"""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from gradviz.core.colors import INF_RGB, NAN_RGB, NO_GRAD_RGB, LogColorScale
from gradviz.render import style
from gradviz.render.node_paint import folder_path, octagon

BAR_W, BAR_H = 200.0, 12.0
ROW_H = 40.0      # colour bar row: bar + tick labels
KEY_H = 26.0      # node-kind key row
TITLE_H = 26.0
LEGEND_W = 620.0


def tick_text(value: float) -> str:
    """Decades the way people read them: 0.01, 0.1, 1, 10, 100, else 1e-5 / 1e+03."""
    e = round(math.log10(value)) if value > 0 else 0
    if value > 0 and abs(math.log10(value) - e) < 1e-9:
        return f"{value:g}" if -2 <= e <= 2 else f"1e{e}"
    return f"{value:.2g}"


SWATCHES = ((NAN_RGB, "NaN"), (INF_RGB, "Inf"), (NO_GRAD_RGB, "no gradient"))
KEY_ENTRIES = ("op", "parameter", "input", "loss", "module group", "unreached parameter")
CAPTION = "gradient norm"
PAD = 8.0         # ColorBarWidget: margin around the drawing


def bar_row_width() -> float:
    """Width of the colour-bar row: caption, bar and the NaN / Inf / no-gradient swatches."""
    w = style.text_width(CAPTION, 11, 500) + 10 + BAR_W + 22
    for _, label in SWATCHES:
        w += 23 + style.text_width(label, 11, 400) + 16
    return w - 16     # no gap after the last swatch label


def key_row_width() -> float:
    """Width of the node-kind key row."""
    return sum(36 + style.text_width(name, 11, 400) + 18 for name in KEY_ENTRIES) - 18


def legend_size(title: str | None = None) -> QSize:
    return QSize(int(LEGEND_W), int(ROW_H + KEY_H + (TITLE_H if title else 0) + 8))


def paint_legend(painter: QPainter, origin: QPointF, scale: LogColorScale, theme: style.Theme,
                 title: str | None = None, subtitle: str | None = None, key: bool = True) -> QRectF:
    """Draw the legend with its top-left at ``origin``; returns the area it used."""
    painter.save()
    painter.setRenderHint(QPainter.Antialiasing)
    painter.setRenderHint(QPainter.TextAntialiasing)
    x, y = origin.x(), origin.y()
    text = QColor(theme.strong_outline)
    muted = QColor(theme.muted_text)
    if title:
        painter.setFont(style.font(14, 600))
        painter.setPen(text)
        painter.drawText(QPointF(x, y + 16), title)
        if subtitle:
            painter.setFont(style.font(11, 400))
            painter.setPen(muted)
            painter.drawText(QPointF(x + style.text_width(title, 14, 600) + 12, y + 16), subtitle)
        y += TITLE_H
    # colour bar
    painter.setFont(style.font(11, 500))
    painter.setPen(text)
    caption = CAPTION
    painter.drawText(QPointF(x, y + BAR_H - 1), caption)
    bx = x + style.text_width(caption, 11, 500) + 10
    gradient = QLinearGradient(bx, 0, bx + BAR_W, 0)
    cmap = scale.cmap
    for k in range(0, len(cmap), 16):
        gradient.setColorAt(k / (len(cmap) - 1), QColor(*map(int, cmap[k])))
    gradient.setColorAt(1.0, QColor(*map(int, cmap[-1])))
    bar = QRectF(bx, y, BAR_W, BAR_H)
    painter.setPen(QPen(muted, 0.8))
    painter.setBrush(gradient)
    painter.drawRoundedRect(bar, 2, 2)
    painter.setFont(style.font(10, 400))
    painter.setPen(muted)
    for value, t in scale.ticks():
        tx = bx + t * BAR_W
        painter.drawLine(QPointF(tx, y + BAR_H), QPointF(tx, y + BAR_H + 3))
        label = tick_text(value)
        w = style.text_width(label, 10, 400)
        painter.drawText(QPointF(min(max(tx - w / 2, bx - 4), bx + BAR_W - w + 4), y + BAR_H + 15), label)
    # swatches for values the bar cannot show
    sx = bx + BAR_W + 22
    for rgb, label in SWATCHES:
        painter.setPen(QPen(muted, 0.8))
        painter.setBrush(QColor(*rgb))
        painter.drawRoundedRect(QRectF(sx, y, 18, BAR_H), 2, 2)
        painter.setPen(text)
        painter.setFont(style.font(11, 400))
        painter.drawText(QPointF(sx + 23, y + BAR_H - 1), label)
        sx += 23 + style.text_width(label, 11, 400) + 16
    used_w = sx - 16 - origin.x()
    y += ROW_H
    if key:
        used_w = max(used_w, _paint_key(painter, x, y, theme))
        y += KEY_H
    painter.restore()
    return QRectF(origin.x(), origin.y(), max(used_w, LEGEND_W), y - origin.y())


def _paint_key(painter: QPainter, x: float, y: float, theme: style.Theme) -> float:
    """Mini node shapes with their kind names; returns the width used."""
    fill = QColor("#e5e7eb") if theme.name == "light" else QColor("#4b5563")
    outline, strong = QColor(theme.outline), QColor(theme.strong_outline)
    painter.setFont(style.font(11, 400))
    start = x
    for name in KEY_ENTRIES:
        r = QRectF(x, y, 30, 16)
        painter.setBrush(fill)
        if name == "op":
            painter.setPen(QPen(outline, 1.0))
            painter.drawRoundedRect(r, 2, 2)
        elif name == "parameter":
            painter.setPen(QPen(strong, 2.2))
            painter.drawRoundedRect(r.adjusted(1, 1, -1, -1), 5, 5)
        elif name == "input":
            painter.setPen(QPen(outline, 1.0))
            painter.drawRoundedRect(r, 8, 8)
        elif name == "loss":
            painter.setPen(QPen(strong, 1.3))
            painter.drawPolygon(octagon(r, 5))
            painter.setBrush(Qt.NoBrush)
            painter.drawPolygon(octagon(r.adjusted(2.5, 2.5, -2.5, -2.5), 3.5))
        elif name == "module group":
            painter.setPen(QPen(strong, 1.3))
            painter.drawPath(folder_path(r.adjusted(0, 0, 0, 0), 13, 4, 2))
        else:
            painter.setPen(QPen(QColor(theme.unreachable), 1.5, Qt.DashLine))
            painter.setBrush(QColor(*NO_GRAD_RGB))
            painter.drawRoundedRect(r.adjusted(1, 1, -1, -1), 5, 5)
        painter.setPen(QColor(theme.strong_outline))
        painter.drawText(QPointF(x + 36, y + 12.5), name)
        x += 36 + style.text_width(name, 11, 400) + 18
    return x - 18 - start


class ColorBarWidget(QWidget):
    """The legend as a widget (the window floats it over the graph view)."""

    def __init__(self, parent: QWidget | None = None, scale: LogColorScale | None = None,
                 theme: str | style.Theme = "light", key: bool = False) -> None:
        super().__init__(parent)
        self._scale = scale or LogColorScale()
        self._theme = style.theme(theme)
        self._key = key
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Fixed)
        self.setAttribute(Qt.WA_TransparentForMouseEvents, False)

    def set_scale(self, scale: LogColorScale) -> None:
        self._scale = scale
        self.update()

    def set_theme(self, theme: str | style.Theme) -> None:
        self._theme = style.theme(theme)
        self.update()

    def sizeHint(self) -> QSize:
        """Exactly what ``paint_legend`` draws plus the margin: nothing is cut off."""
        width = max(bar_row_width(), key_row_width() if self._key else 0.0)
        return QSize(math.ceil(width + 2 * PAD), int(ROW_H + (KEY_H if self._key else 0) + 12))

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        bg = QColor(self._theme.background)
        bg.setAlpha(225)  # an overlay: let the graph show through a little
        painter.setRenderHint(QPainter.Antialiasing)
        painter.setPen(Qt.NoPen)
        painter.setBrush(bg)
        painter.drawRoundedRect(QRectF(self.rect()), 6, 6)
        paint_legend(painter, QPointF(PAD, PAD), self._scale, self._theme, key=self._key)
        painter.end()
