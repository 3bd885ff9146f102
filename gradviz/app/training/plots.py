"""Live training plots (pyqtgraph), redrawn from a ``History`` by a timer (<= 30 Hz).

Panels, all against the step: loss; global gradient norm before/after clipping (log y);
per-parameter gradient norms (log y; dashed where clipping shrank them: the norm after
clipping) with a checkable list to show/hide each curve;
update-to-weight ratio per parameter (log y, the same curves shown); learning rate.
Hovering a plot shows a vertical line and the values at that step. ``highlight(name,
color)`` makes one parameter's curves thick, on top, in the given colour.
"""
from __future__ import annotations

import math
import time

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton,
                               QScrollArea, QSlider, QVBoxLayout, QWidget)

import pyqtgraph as pg

from gradviz.app.training.history import History
from gradviz.app.training.plot_widget import Plot, positive, swatch, value_text
from gradviz.app.training.smoothing import ema

MAX_HZ = 30
MAX_INTERVAL_MS = 1000
FRAME_BUDGET_S = 0.012        # per timer tick, at most about this much drawing (then the next tick goes on)
DEFAULT_VISIBLE = 12          # parameters shown at first (the rest can be ticked in the list)
DEFAULT_SMOOTHING = 0.6       # TensorBoard's default
FAINT = 70                    # alpha of a raw curve drawn under its smoothed one


class TrainingPlots(QWidget):
    """The plots; call ``set_names`` when the parameters are known, then they follow ``history``."""

    paramToggled = Signal(str, bool)

    def __init__(self, history: History, parent=None, max_hz: int = MAX_HZ) -> None:
        # long: five plots, their curves, hover texts, the parameter list and the controls, built in order
        super().__init__(parent)
        self.history = history
        self.names: list[str] = []
        self.colors: list[QColor] = []
        self.visible: set[str] = set()
        self.highlighted: str | None = None
        self._highlight_color: QColor | None = None
        self._drawn = -1
        self._dirty: list[int] = []

        self.loss_plot = Plot("loss")
        self.norm_plot = Plot("grad norm (pre/post clip)", log_y=True)
        self.param_plot = Plot("grad norm per parameter", log_y=True)    # titles fit a plot at its minimum width
        self.param_plot.setToolTip("Gradient norm of each parameter; dashed: after clipping, where clipping shrank it")
        self.ratio_plot = Plot("update / weight ratio", log_y=True)
        self.lr_plot = Plot("learning rate")
        self.plots = [self.loss_plot, self.norm_plot, self.param_plot, self.ratio_plot, self.lr_plot]
        # no x-link: the plots differ in width, and pyqtgraph keeps linked views pixel-aligned
        # raw curves (faint while smoothing is on) and their exponential moving averages on top
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen((40, 110, 200), width=1))
        self.loss_smooth = self.loss_plot.plot(pen=pg.mkPen((40, 110, 200), width=2))
        self.pre_smooth = self.norm_plot.plot(pen=pg.mkPen((200, 90, 40), width=2))
        self.pre_curve = self.norm_plot.plot(pen=pg.mkPen((200, 90, 40), width=1), name="pre-clip")
        self.post_curve = self.norm_plot.plot(pen=pg.mkPen((40, 150, 90), width=1, style=Qt.DashLine),
                                              name="post-clip")
        self.lr_curve = self.lr_plot.plot(pen=pg.mkPen((130, 80, 180), width=1))
        self.param_curves: dict[str, pg.PlotDataItem] = {}
        self.ratio_curves: dict[str, pg.PlotDataItem] = {}
        self.clip_curves: dict[str, pg.PlotDataItem] = {}     # per parameter, where clipping shrank it
        self._index: dict[str, int] = {}                      # parameter name -> its place in names
        self.loss_plot.describe = self._describe(lambda i: f"loss {value_text(self._col('loss')[i])}")
        self.norm_plot.describe = self._describe(
            lambda i: f"pre {value_text(self._col('grad_norm')[i])}  post {value_text(self._col('grad_norm_clipped')[i])}")
        self.lr_plot.describe = self._describe(lambda i: f"lr {value_text(self._col('lr')[i])}")
        self.param_plot.describe = self._describe(lambda i: self._matrix_text("param_norms", i, "param_norms_clipped"))
        self.ratio_plot.describe = self._describe(lambda i: self._matrix_text("update_ratios", i))

        self.list = QListWidget()
        self.list.setMaximumWidth(220)
        self.list.itemChanged.connect(self._item_changed)
        self.list.itemClicked.connect(lambda item: None)
        all_btn, none_btn = QPushButton("All"), QPushButton("None")
        all_btn.clicked.connect(lambda: self.set_all_visible(True))
        none_btn.clicked.connect(lambda: self.set_all_visible(False))
        side = QWidget()
        sl = QVBoxLayout(side)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(QLabel("Parameters <span style='color:gray'>(dashed: after clipping)</span>"))
        sl.addWidget(self.list, 1)
        row = QHBoxLayout()
        row.addWidget(all_btn)
        row.addWidget(none_btn)
        sl.addLayout(row)

        # one row in a wide, short dock; each plot keeps a readable size, the row scrolls past that
        row_widget = QWidget()
        plots_row = QHBoxLayout(row_widget)
        plots_row.setContentsMargins(0, 0, 0, 0)
        plots_row.setSpacing(4)
        for plot in self.plots:
            plots_row.addWidget(plot, 2 if plot is self.param_plot else 1)
        scroller = QScrollArea()
        scroller.setWidgetResizable(True)
        scroller.setFrameShape(QScrollArea.NoFrame)
        scroller.setWidget(row_widget)
        self.log_loss = QCheckBox("log loss")
        self.log_loss.setToolTip("Loss axis: logarithmic or linear")
        self.log_loss.toggled.connect(self.set_log_loss)
        self.smoothing = QSlider(Qt.Horizontal)
        self.smoothing.setRange(0, 99)
        self.smoothing.setValue(int(DEFAULT_SMOOTHING * 100))
        self.smoothing.setMaximumWidth(160)
        self.smoothing.setToolTip("Exponential moving average of the loss and gradient norm (as in TensorBoard); "
                                  "the raw curve stays drawn faintly")
        self.smoothing_label = QLabel()
        self.smoothing.valueChanged.connect(self._smoothing_changed)
        controls = QHBoxLayout()
        controls.setContentsMargins(4, 0, 4, 0)
        controls.addWidget(QLabel("Smoothing"))
        controls.addWidget(self.smoothing)
        controls.addWidget(self.smoothing_label)
        controls.addSpacing(16)
        controls.addWidget(self.log_loss)
        controls.addStretch(1)
        left = QVBoxLayout()
        left.setContentsMargins(0, 0, 0, 0)
        left.addLayout(controls)
        left.addWidget(scroller, 1)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(2, 2, 2, 2)
        outer.addLayout(left, 1)
        outer.addWidget(side)

        self._min_interval = max(1, int(1000 / max_hz))
        self.timer = QTimer(self)
        self.timer.setInterval(self._min_interval)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()
        self._smoothing_changed(self.smoothing.value())

    # -- parameters -------------------------------------------------------
    def set_names(self, names: list[str]) -> None:
        if list(names) == self.names:
            return
        for c in list(self.param_curves.values()):
            self.param_plot.removeItem(c)
        for c in list(self.ratio_curves.values()):
            self.ratio_plot.removeItem(c)
        for c in list(self.clip_curves.values()):
            self.param_plot.removeItem(c)
        self.param_curves.clear()
        self.ratio_curves.clear()
        self.clip_curves.clear()
        self.names = list(names)
        self._index = {name: i for i, name in enumerate(self.names)}
        n = max(1, len(self.names))
        self.colors = [pg.intColor(i, hues=min(n, 12), values=max(1, math.ceil(n / 12)), minValue=160)
                       for i in range(len(self.names))]
        self.visible = set(self.names[:DEFAULT_VISIBLE])
        self.list.blockSignals(True)
        self.list.clear()
        for name, color in zip(self.names, self.colors):
            if name in self.visible:
                self._curves_of(name)
            item = QListWidgetItem(swatch(color), name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if name in self.visible else Qt.Unchecked)
            item.setData(Qt.UserRole, name)
            self.list.addItem(item)
        self.list.blockSignals(False)
        if self.highlighted in self._index:
            self.highlight(self.highlighted, self._highlight_color)
        self._drawn = -1

    def has_param(self, name: str) -> bool:
        return name in self._index

    def _curves_of(self, name: str) -> tuple:
        """Parameter ``name``'s curves (norm, update ratio, norm after clipping), made when first
        shown: pyqtgraph's ``addItem`` walks every item already in the plot, so making all of a
        big model's up front took minutes (GPT-200: 2,406 parameters, the window frozen)."""
        if name not in self.param_curves:
            color = self.colors[self._index[name]]
            pen = pg.mkPen(color, width=1)
            self.param_curves[name] = self.param_plot.plot(pen=pen)
            self.ratio_curves[name] = self.ratio_plot.plot(pen=pen)
            self.clip_curves[name] = self.param_plot.plot(pen=pg.mkPen(color, width=1, style=Qt.DashLine))
        return self.param_curves[name], self.ratio_curves[name], self.clip_curves[name]

    def set_visible(self, name: str, on: bool) -> None:
        """Show or hide one parameter's curves (the list's tick follows)."""
        if name not in self._index:
            return
        (self.visible.add if on else self.visible.discard)(name)
        if on or name in self.param_curves:
            for c in self._curves_of(name):
                c.setVisible(on)
        item = self.list.item(self._index[name])
        if (item.checkState() == Qt.Checked) != on:
            self.list.blockSignals(True)
            item.setCheckState(Qt.Checked if on else Qt.Unchecked)
            self.list.blockSignals(False)
        if on:
            self._draw_param(name)
        self.paramToggled.emit(name, on)

    def set_all_visible(self, on: bool) -> None:
        for name in self.names:
            self.set_visible(name, on)

    def _item_changed(self, item: QListWidgetItem) -> None:
        self.set_visible(item.data(Qt.UserRole), item.checkState() == Qt.Checked)

    def highlight(self, name: str | None, color: QColor | None = None) -> None:
        """Thick, on top and in ``color`` (the graph node's colour): one parameter's curves."""
        prev = self.highlighted
        if prev in self.param_curves and prev != name:
            i = self._index[prev]
            for c in (self.param_curves[prev], self.ratio_curves[prev]):
                c.setPen(pg.mkPen(self.colors[i], width=1))
                c.setZValue(0)
            self.clip_curves[prev].setPen(pg.mkPen(self.colors[i], width=1, style=Qt.DashLine))
            self.clip_curves[prev].setZValue(0)
            self.set_visible(prev, prev in self.visible)
        self.highlighted = name
        self._highlight_color = color
        if name in self._index:
            self._curves_of(name)
            i = self._index[name]
            col = QColor(color) if color is not None else self.colors[i]
            for c in (self.param_curves[name], self.ratio_curves[name]):
                c.setPen(pg.mkPen(col, width=3.5))
                c.setZValue(10)
                c.setVisible(True)
            self.clip_curves[name].setPen(pg.mkPen(col, width=2.5, style=Qt.DashLine))
            self.clip_curves[name].setZValue(10)
            self.clip_curves[name].setVisible(True)
            self._draw_param(name)

    def curve_color(self, name: str) -> QColor | None:
        c = self.param_curves.get(name)
        return None if c is None else c.opts["pen"].color()

    # -- drawing ----------------------------------------------------------
    def _col(self, key: str) -> np.ndarray:
        return self.history.column(key)

    def refresh(self, force: bool = False) -> None:
        """Pull from the history when it changed (called by the timer).

        Plots are redrawn one at a time, each painted at once, until ``FRAME_BUDGET_S`` is
        spent; the rest wait for the next tick. So the GUI thread is never blocked for the
        five plots together, and the timer slows down when drawing is expensive.
        """
        h = self.history
        if force or (h.version != self._drawn and self.isVisible()):
            # queue the plots not already waiting, behind those that are: a plot the budget
            # skipped last tick goes first now, so none starves while data keeps arriving
            self._dirty += [i for i in range(len(self.plots)) if i not in self._dirty]
        if not self._dirty:
            return
        self._drawn = h.version
        start = time.perf_counter()
        x = h.column("step")
        while self._dirty:
            i = self._dirty.pop(0)
            self._draw_plot(i, x)
            if self.isVisible():
                self.plots[i].viewport().repaint()     # paint now: measured, and not queued twice
            if time.perf_counter() - start > FRAME_BUDGET_S and not force:
                break
        self._adapt(time.perf_counter() - start)

    def _draw_plot(self, i: int, x: np.ndarray) -> None:
        h = self.history
        plot = self.plots[i]
        if len(x):
            plot.enableAutoRange(axis="x")
        else:     # no step yet: the axis starts at step 0 (pyqtgraph's empty view spans -1000 ... 1000)
            plot.setXRange(0, 1, padding=0)
        if plot is self.loss_plot:
            loss = h.column("loss")
            if self.log_loss.isChecked():
                loss = positive(loss)
            self.loss_curve.setData(x, loss, connect="finite")
            self._draw_smooth(self.loss_smooth, x, loss)
        elif plot is self.norm_plot:
            pre = positive(h.column("grad_norm"))
            self.pre_curve.setData(x, pre, connect="finite")
            self._draw_smooth(self.pre_smooth, x, pre)
            self.post_curve.setData(x, positive(h.column("grad_norm_clipped")), connect="finite")
        elif plot is self.lr_plot:
            lr = h.column("lr")
            self.lr_curve.setData(x, lr, connect="finite")
            finite = lr[np.isfinite(lr)] if len(lr) else lr
            if len(finite) and finite.min() == finite.max():      # constant: show it above zero, not centred
                top = abs(float(finite[0])) or 1.0
                self.lr_plot.setYRange(min(0.0, float(finite[0])), 1.5 * top, padding=0)
            else:
                self.lr_plot.enableAutoRange(axis="y")
        else:
            ratios = plot is self.ratio_plot
            shown = self.visible | ({self.highlighted} if self.highlighted in self.param_curves else set())
            for name in shown:
                self._draw_param(name, x, params=not ratios, ratios=ratios)

    # -- smoothing and axes -------------------------------------------------
    @property
    def smoothing_weight(self) -> float:
        return self.smoothing.value() / 100.0

    def _smoothing_changed(self, value: int) -> None:
        w = value / 100.0
        self.smoothing_label.setText(f"{w:.2f}")
        for raw, color in ((self.loss_curve, (40, 110, 200)), (self.pre_curve, (200, 90, 40))):
            raw.setPen(pg.mkPen((*color, FAINT if w > 0 else 255), width=1))
        self.loss_smooth.setVisible(w > 0)
        self.pre_smooth.setVisible(w > 0)
        self.refresh(force=True)

    def _draw_smooth(self, curve, x: np.ndarray, y: np.ndarray) -> None:
        if self.smoothing_weight > 0 and len(y):
            curve.setData(x, ema(y, self.smoothing_weight), connect="finite")
        else:
            curve.setData([], [])      # no rows (another document): no smoothed curve of the last one

    def set_log_loss(self, on: bool) -> None:
        """The loss axis logarithmic (non-positive losses leave gaps) or linear."""
        if self.log_loss.isChecked() != on:
            self.log_loss.setChecked(on)
            return
        self.loss_plot.getPlotItem().setLogMode(x=False, y=on)
        self.refresh(force=True)

    def _adapt(self, cost: float) -> None:
        """Redraw less often when drawing is expensive: plots use at most ~1/5 of the GUI thread."""
        interval = int(min(MAX_INTERVAL_MS, max(self._min_interval, 5000 * cost)))
        if abs(interval - self.timer.interval()) > 5:
            self.timer.setInterval(interval)

    def _draw_param(self, name: str, x: np.ndarray | None = None, params: bool = True,
                    ratios: bool = True) -> None:
        h = self.history
        if name not in self.param_curves or len(h.names) != len(self.names):
            return
        i = self._index[name]
        x = h.column("step") if x is None else x
        if params:
            pre = h.column("param_norms")[:, i]
            self.param_curves[name].setData(x, positive(pre), connect="finite")
            post = h.column("param_norms_clipped")[:, i]
            with np.errstate(invalid="ignore"):
                shrunk = post < pre * (1 - 1e-6)
            self.clip_curves[name].setData(x, np.where(shrunk, positive(post), np.nan), connect="finite")
        if not ratios:
            return
        # update ratios may be measured every few steps only (NaN between): draw the measured ones joined
        r = positive(h.column("update_ratios")[:, i])
        keep = ~np.isnan(r)
        self.ratio_curves[name].setData(x[keep], r[keep])

    def points(self) -> int:
        """How many points the loss curve holds (tests)."""
        data = self.loss_curve.xData          # the data set, before clipping/downsampling for display
        return 0 if data is None else len(data)

    # -- hover ------------------------------------------------------------
    def _describe(self, text_at):
        def describe(x: float):
            steps = self.history.column("step")
            if len(steps) == 0:
                return None, None
            i = int(np.clip(np.searchsorted(steps, x), 0, len(steps) - 1))
            if i > 0 and abs(steps[i - 1] - x) < abs(steps[i] - x):
                i -= 1
            return f"step {int(steps[i])}\n{text_at(i)}", float(steps[i])
        return describe

    def _matrix_text(self, key: str, i: int, after: str | None = None) -> str:
        """Values of the shown parameters at row ``i``; ``after``: "pre → post" where it is smaller."""
        m, post = self._col(key), self._col(after) if after else None
        shown = [n for n in self.names if n in self.visible or n == self.highlighted]
        if self.highlighted in shown:
            shown.remove(self.highlighted)
            shown.insert(0, self.highlighted)
        lines = []
        for j in [self._index[n] for n in shown[:6]]:
            shrunk = post is not None and post[i, j] < m[i, j] * (1 - 1e-6)
            tail = f" → {value_text(float(post[i, j]))}" if shrunk else ""
            lines.append(f"{self.names[j]}: {value_text(float(m[i, j]))}{tail}")
        if len(shown) > 6:
            lines.append(f"… {len(shown) - 6} more")
        return "\n".join(lines)

    def closeEvent(self, event) -> None:
        self.timer.stop()
        super().closeEvent(event)

