"""A compact histogram of gradient (or value) entries, from a node's ``grad_hist``.

The plot (pyqtgraph, 0.3 s to import) is made when the first histogram arrives, not when the
inspector is built: a window opens before any node is selected, and pyqtgraph's import was on
the path from launch to the first graph on screen.
"""
from __future__ import annotations

from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget


def has_data(hist: dict | None) -> bool:
    return bool(hist) and hist.get("edges") is not None and hist.get("counts") is not None


class Histogram(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("histogram")
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self.plot = None     # the HistogramPlot, once there was something to plot

    def _ensure_plot(self):
        if self.plot is None:
            from gradviz.app.histogram_plot import HistogramPlot

            self.plot = HistogramPlot(self)
            self._layout.addWidget(self.plot)
        return self.plot

    def apply_palette(self) -> None:
        if self.plot is not None:
            self.plot.apply_palette()

    def set_hist(self, hist: dict | None) -> bool:
        """Show ``{edges, counts}``; returns False (and clears) when there is none."""
        if self.plot is None and not has_data(hist):
            return False
        return self._ensure_plot().set_hist(hist)

    def data(self):
        return self._ensure_plot().data()
