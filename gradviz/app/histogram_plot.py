"""The pyqtgraph plot behind ``histogram.Histogram`` (imported when a first histogram is shown)."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QSizePolicy


class HistogramPlot(pg.PlotWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("histogram")
        self.setMinimumHeight(120)
        self.setMaximumHeight(160)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        item = self.getPlotItem()
        item.showGrid(x=False, y=True, alpha=0.15)
        item.getAxis("left").setWidth(36)
        self._curve = pg.PlotCurveItem(x=np.array([0.0, 1.0]), y=np.array([0.0]), stepMode="center", fillLevel=0)
        self.addItem(self._curve)
        self.apply_palette()

    def apply_palette(self) -> None:
        pal = self.palette()
        self.setBackground(pal.base().color())
        fg = pal.text().color()
        for name in ("left", "bottom"):
            axis = self.getPlotItem().getAxis(name)
            axis.setPen(pg.mkPen(pal.mid().color()))
            axis.setTextPen(pg.mkPen(fg))
        accent = pal.highlight().color()
        fill = pg.mkColor(accent)
        fill.setAlpha(110)
        self._curve.setPen(pg.mkPen(accent, width=1.2))
        self._curve.setBrush(pg.mkBrush(fill))

    def set_hist(self, hist: dict | None) -> bool:
        """Show ``{edges, counts}``; returns False (and clears) when there is none."""
        if not hist or hist.get("edges") is None or hist.get("counts") is None:
            self._curve.setData([0, 1], [0])
            return False
        edges = np.asarray(hist["edges"], dtype=float)
        counts = np.asarray(hist["counts"], dtype=float)
        if edges.size != counts.size + 1 or counts.size == 0:
            self._curve.setData([0, 1], [0])
            return False
        if edges[-1] == edges[0]:
            edges = edges + np.linspace(-0.5, 0.5, edges.size)
        self._curve.setData(edges, counts)
        self.getPlotItem().enableAutoRange()
        return True

    def data(self):
        return self._curve.getData()
