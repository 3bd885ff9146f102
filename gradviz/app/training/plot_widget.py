"""One live plot of the Training plots dock: a pyqtgraph PlotWidget with a hover line and a
value label, a fixed-width value axis (labels never overlap the plot next to it, nor each
other) and a readable minimum size."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor, QIcon, QPixmap

from gradviz.core.runtime.formatting import number

MIN_W, MIN_H = 240, 150      # px: below this, the dock scrolls instead of squeezing the plot
AXIS_W = 54                  # px for the value axis: room for "1.5e-05" without overlap


def positive(values: np.ndarray) -> np.ndarray:
    """For log axes: non-positive and non-finite values become NaN (gaps), never warnings."""
    out = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(out) & (out > 0), out, np.nan)


def value_text(v: float | None) -> str:
    """A plotted value; NaN in a history column means "not measured at this step": '—'."""
    return number(None if v is None or (isinstance(v, float) and math.isnan(v)) else v)


def swatch(color: QColor) -> QIcon:
    """A parameter's colour, as the icon of its row in the list."""
    pm = QPixmap(12, 12)
    pm.fill(color)
    return QIcon(pm)


class ValueAxis(pg.AxisItem):
    """An axis whose tick labels never overlap: on a log axis spanning less than a few decades
    pyqtgraph labels the minor ticks 2..9 of each decade too, and 0.06, 0.07, 0.08, 0.09 (a few
    pixels apart near the decade's top) were drawn over each other (seen under Xvfb). A label
    that would touch one already placed is left out; the major (coarser) levels come first."""

    def generateDrawSpecs(self, p):
        specs = super().generateDrawSpecs(p)
        if specs is None:
            return None
        axis, ticks, texts = specs
        kept: list = []
        for rect, flags, text in texts:
            padded = rect.adjusted(-1, -1, 1, 1)
            if not any(padded.intersects(other) for other, _, _ in kept):
                kept.append((rect, flags, text))
        return axis, ticks, kept


class Plot(pg.PlotWidget):
    """A PlotWidget with a hover line and a value label."""

    def __init__(self, title: str, log_y: bool = False) -> None:
        super().__init__(axisItems={"left": ValueAxis("left")})
        self.setBackground(None)
        item = self.getPlotItem()
        item.setTitle(title, size="9pt")
        # no grid: pyqtgraph replays the axes (with their grid lines) as QPictures on every paint,
        # which dominated the redraw cost
        item.setLogMode(x=False, y=log_y)
        item.setClipToView(True)
        item.setDownsampling(auto=True, mode="peak")
        item.getAxis("left").setWidth(AXIS_W)
        self.setMinimumSize(MIN_W, MIN_H)
        self.hover_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen((128, 128, 128, 160), width=1))
        self.hover_line.hide()
        self.addItem(self.hover_line, ignoreBounds=True)
        self.hover_label = pg.TextItem(anchor=(0, 0), color=(90, 90, 90))
        self.hover_label.hide()
        self.addItem(self.hover_label, ignoreBounds=True)
        self.proxy = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=30, slot=self._moved)
        self.describe = None          # step index -> text, set by TrainingPlots

    def _moved(self, event) -> None:
        pos = event[0]
        vb = self.getPlotItem().vb
        if not self.sceneBoundingRect().contains(pos) or self.describe is None:
            self.hover_line.hide()
            self.hover_label.hide()
            return
        x = vb.mapSceneToView(pos).x()
        text, step = self.describe(x)
        if text is None:
            self.hover_line.hide()
            self.hover_label.hide()
            return
        self.hover_line.setPos(step)
        self.hover_line.show()
        (x0, x1), (y0, y1) = vb.viewRange()
        self.hover_label.setText(text)
        self.hover_label.setPos(x0, y1)
        self.hover_label.show()
