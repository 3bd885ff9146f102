"""The colour legend: a log colour bar with decade ticks, NaN/Inf and "no gradient"
swatches, a key of node shapes, and one entry per kind of diagnosis mark drawn (cut
edges, badges). ``paint_legend`` draws it with any QPainter (image export puts it above
the graph with a header); ``ColorBarWidget`` shows the same drawing over the window's view.
"""
from __future__ import annotations

import math
from typing import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QLinearGradient, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from gradviz.core.output.colors import INF_RGB, NAN_RGB, NO_GRAD_RGB, LogColorScale
from gradviz.core.runtime.formatting import number
from gradviz.core.output.marks import EDGE_STYLES, NODE_STYLES
from gradviz.core.output.structure_colors import StructureColors
from gradviz.render.export.structure_paint import paint_structure_row
from gradviz.render.export.swatch import SWATCH_H, paint_swatch
from gradviz.render.parts.node_paint import folder_path, octagon
from gradviz.render.primitives import style
from gradviz.render.scene.marks_layer import mark_pen, paint_badge

BAR_W, BAR_H = 200.0, SWATCH_H
ROW_H = 40.0      # colour bar row: bar + tick labels
KEY_H = 26.0      # node-kind key row
MARKS_H = 24.0    # diagnosis-mark row
TITLE_H = 24.0
SUBTITLE_H = 20.0
LEGEND_W = 620.0


def tick_text(value: float) -> str:
    """Tick labels in the one number format, compact: 0.01, 0.1, 1, 10, 100, 1e-5, 1e4."""
    return number(value, compact=True)


SWATCHES = ((NAN_RGB, "NaN"), (INF_RGB, "Inf"), (NO_GRAD_RGB, "no gradient"))
KEY_ENTRIES = ("op", "parameter", "input", "loss", "module group", "unreached parameter")
FRAME_ENTRY = "module (expanded)"
CAPTION = "gradient norm"
FIXED_CAPTION = "gradient norm (fixed range)"
PAD = 8.0         # ColorBarWidget: margin around the drawing


def mark_label(style_name: str) -> str:
    return EDGE_STYLES.get(style_name) or NODE_STYLES.get(style_name) or style_name


def bar_row_width(fixed: bool = False, split: bool = False) -> float:
    """Width of the colour-bar row: caption, bar and the NaN / Inf / no-gradient swatches (``split``:
    the widest of the bar and the swatches, each in a row of its own)."""
    bar = style.text_width(FIXED_CAPTION if fixed else CAPTION, 11, 500) + 10 + BAR_W + 22
    swatches = sum(23 + style.text_width(label, 11, 400) + 16 for _, label in SWATCHES) - 16
    return max(bar - 22, swatches) if split else bar + swatches     # no gap after the last swatch label


def swatches_below(fixed: bool, max_width: float | None) -> bool:
    """The swatches go under the bar when one row would be wider than ``max_width`` (a narrow view)."""
    return max_width is not None and bar_row_width(fixed) > max_width


def key_row_width(frames: bool = False) -> float:
    """Width of the node-kind key row."""
    entries = KEY_ENTRIES + ((FRAME_ENTRY,) if frames else ())
    return sum(36 + style.text_width(name, 11, 400) + 18 for name in entries) - 18


def _mark_width(name: str) -> float:
    return 36 + style.text_width(mark_label(name), 11, 400)


def marks_row_width(marks: Sequence[str]) -> float:
    return sum(_mark_width(m) + 18 for m in marks) - 18 if marks else 0.0


def mark_rows(marks: Sequence[str], max_width: float | None = None) -> list[list[str]]:
    """The mark entries in rows no wider than ``max_width`` (one row when None); an entry wider
    than that gets a row of its own."""
    rows: list[list[str]] = []
    for name in marks:
        if rows and (max_width is None or marks_row_width(rows[-1] + [name]) <= max_width):
            rows[-1].append(name)
        else:
            rows.append([name])
    return rows


def legend_size(title: str | None = None, subtitle: str | None = None, marks: Sequence[str] = (),
                frames: bool = False, fixed: bool = False, key: bool = True,
                max_width: float | None = None) -> QSize:
    """Exactly the area ``paint_legend`` uses with the same arguments."""
    rows = mark_rows(marks, max_width)
    split = swatches_below(fixed, max_width)
    w = max([bar_row_width(fixed, split), key_row_width(frames) if key else 0.0] + [marks_row_width(r) for r in rows])
    if title:
        w = max(w, style.text_width(title, 14, 600))
    if subtitle:
        w = max(w, style.text_width(subtitle, 11, 400))
    h = ROW_H + (MARKS_H if split else 0) + (KEY_H if key else 0) + MARKS_H * len(rows)
    h += (TITLE_H if title else 0) + (SUBTITLE_H if subtitle else 0)
    return QSize(math.ceil(w), math.ceil(h + 4))


def paint_legend(painter: QPainter, origin: QPointF, scale: LogColorScale, theme: style.Theme,
                 title: str | None = None, subtitle: str | None = None, key: bool = True,
                 marks: Sequence[str] = (), frames: bool = False, fixed: bool = False,
                 max_width: float | None = None) -> QRectF:
    """Draw the legend with its top-left at ``origin``; returns the area it used.

    ``marks``: the mark styles drawn in the graph (each gets an entry, in rows no wider than
    ``max_width``); ``frames``: module frames are drawn (the key explains them); ``fixed``: the
    colour range is fixed."""
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
        y += TITLE_H
    if subtitle:
        painter.setFont(style.font(11, 400))
        painter.setPen(muted)
        painter.drawText(QPointF(x, y + 12), subtitle)
        y += SUBTITLE_H
    if isinstance(scale, StructureColors):   # a graph without values: what the colours mean instead
        paint_structure_row(painter, x, y, scale, theme, bar_row_width(fixed))
    else:
        split = swatches_below(fixed, max_width)
        _paint_bar(painter, x, y, scale, theme, fixed, split)
        if split:
            y += MARKS_H
    y += ROW_H
    if key:
        _paint_key(painter, x, y, theme, frames)
        y += KEY_H
    for row in mark_rows(marks, max_width):
        _paint_marks(painter, x, y, theme, row)
        y += MARKS_H
    painter.restore()
    size = legend_size(title, subtitle, marks, frames, fixed, key, max_width)
    return QRectF(origin.x(), origin.y(), size.width(), y - origin.y())


def _paint_bar(painter: QPainter, x: float, y: float, scale: LogColorScale, theme: style.Theme,
               fixed: bool, split: bool = False) -> None:
    text, muted = QColor(theme.strong_outline), QColor(theme.muted_text)
    caption = FIXED_CAPTION if fixed else CAPTION
    painter.setFont(style.font(11, 500))
    painter.setPen(text)
    painter.drawText(QPointF(x, y + BAR_H - 1), caption)
    bx = x + style.text_width(caption, 11, 500) + 10
    gradient = QLinearGradient(bx, 0, bx + BAR_W, 0)
    cmap = scale.cmap
    for k in range(0, len(cmap), 16):
        gradient.setColorAt(k / (len(cmap) - 1), QColor(*map(int, cmap[k])))
    gradient.setColorAt(1.0, QColor(*map(int, cmap[-1])))
    painter.setPen(QPen(muted, 0.8))
    painter.setBrush(gradient)
    painter.drawRoundedRect(QRectF(bx, y, BAR_W, BAR_H), 2, 2)
    painter.setFont(style.font(10, 400))
    painter.setPen(muted)
    for value, t in scale.ticks():
        tx = bx + t * BAR_W
        painter.drawLine(QPointF(tx, y + BAR_H), QPointF(tx, y + BAR_H + 3))
        label = tick_text(value)
        w = style.text_width(label, 10, 400)
        painter.drawText(QPointF(min(max(tx - w / 2, bx - 4), bx + BAR_W - w + 4), y + BAR_H + 15), label)
    sx, sy = (x, y + ROW_H) if split else (bx + BAR_W + 22, y)  # swatches for values the bar cannot show
    for rgb, label in SWATCHES:
        sx = paint_swatch(painter, sx, sy, rgb, label, theme) + 16


def _paint_marks(painter: QPainter, x: float, y: float, theme: style.Theme, marks: Sequence[str]) -> None:
    """One sample and sentence per mark style drawn: a dashed red line, or the badge."""
    painter.setFont(style.font(11, 400))
    for name in marks:
        if name in EDGE_STYLES:
            painter.setPen(mark_pen(theme, name))
            painter.drawLine(QPointF(x + 1, y + 8), QPointF(x + 29, y + 8))
        else:
            paint_badge(painter, QPointF(x + 15, y + 8), name)
        painter.setPen(QColor(theme.strong_outline))
        painter.drawText(QPointF(x + 36, y + 12.5), mark_label(name))
        x += _mark_width(name) + 18


def _paint_key(painter: QPainter, x: float, y: float, theme: style.Theme, frames: bool = False) -> float:
    """Mini node shapes with their kind names (and the module frame when drawn); returns the width used."""
    fill = QColor("#e5e7eb") if theme.name == "light" else QColor("#4b5563")
    outline, strong = QColor(theme.outline), QColor(theme.strong_outline)
    painter.setFont(style.font(11, 400))
    start = x
    for name in KEY_ENTRIES + ((FRAME_ENTRY,) if frames else ()):
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
        elif name == FRAME_ENTRY:
            ink = QColor(theme.strong_outline)
            ink.setAlphaF(0.06)
            painter.setPen(QPen(QColor(theme.muted_text), 1.0))
            painter.setBrush(ink)
            painter.drawRect(r)
        else:
            painter.setPen(QPen(QColor(theme.unreachable), 1.5, Qt.DashLine))
            painter.setBrush(QColor(*NO_GRAD_RGB))
            painter.drawRoundedRect(r.adjusted(1, 1, -1, -1), 5, 5)
        painter.setPen(QColor(theme.strong_outline))
        painter.drawText(QPointF(x + 36, y + 12.5), name)
        x += 36 + style.text_width(name, 11, 400) + 18
    return x - 18 - start


class ColorBarWidget(QWidget):
    """The legend as a widget (the window floats it over the graph view); it grows an
    entry for each kind of diagnosis mark the scene draws (``set_marks``)."""

    def __init__(self, parent: QWidget | None = None, scale: LogColorScale | None = None,
                 theme: str | style.Theme = "light", key: bool = False) -> None:
        super().__init__(parent)
        self._scale = scale or LogColorScale()
        self._theme = style.theme(theme)
        self._key = key
        self._marks: list[str] = []
        self._max_width: float | None = None     # the mark entries wrap to it (the view's width)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Fixed)
        self.setAttribute(Qt.WA_TransparentForMouseEvents, False)

    def set_scale(self, scale: LogColorScale) -> None:
        self._scale = scale
        self.update()

    def set_theme(self, theme: str | style.Theme) -> None:
        self._theme = style.theme(theme)
        self.update()

    def set_marks(self, styles: Sequence[str]) -> None:
        """The mark styles drawn in the graph now (an entry each); resize after a change."""
        styles = list(styles)
        if styles != self._marks:
            self._marks = styles
            self.updateGeometry()
            self.resize(self.sizeHint())
            self.update()

    def set_max_width(self, width: float | None) -> None:
        """The widest the legend may be (its mark entries wrap into rows); None: one row."""
        inner = None if width is None else max(1.0, width - 2 * PAD)
        if inner != self._max_width:
            self._max_width = inner
            self.updateGeometry()
            self.update()

    def sizeHint(self) -> QSize:
        """Exactly what ``paint_legend`` draws plus the margin: nothing is cut off."""
        size = legend_size(key=self._key, marks=self._marks, max_width=self._max_width)
        return QSize(size.width() + math.ceil(2 * PAD), size.height() + math.ceil(2 * PAD) - 4)

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
        paint_legend(painter, QPointF(PAD, PAD), self._scale, self._theme, key=self._key, marks=self._marks,
                     max_width=self._max_width)
        painter.end()
