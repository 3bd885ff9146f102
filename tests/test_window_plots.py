"""#12 item 8: plots people can read. Each plot keeps a readable size, the loss axis toggles
log/linear, an EMA smoothing control (TensorBoard's debiased EMA), fixed-width value axes,
and the Training dock never hides the Inspector while training runs."""
from __future__ import annotations

import numpy as np

from test_app_support import MLP, WAIT_MS, open_and_wait


def reference_ema(values, w):
    """TensorBoard's smoothing, one value at a time (non-finite values skipped)."""
    out, last, n = [], 0.0, 0
    for v in values:
        if not np.isfinite(v):
            out.append(np.nan)
            continue
        last, n = last * w + (1 - w) * v, n + 1
        out.append(last / (1 - w ** n))
    return np.array(out)


def test_ema_equals_tensorboards_smoothing():
    from gradviz.app.training.smoothing import ema

    rng = np.random.default_rng(0)
    y = 3 * np.exp(-np.arange(3000) / 500) + rng.normal(scale=0.1, size=3000)
    y[[3, 500, 2999]] = np.nan
    y[10] = np.inf
    for w in (0.0, 0.05, 0.6, 0.9, 0.99, 0.999):
        want = reference_ema(y, w) if w else np.where(np.isfinite(y), y, np.nan)
        got = ema(y, w)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        assert np.nanmax(np.abs(got - want)) < 1e-9


def test_training_plots_are_readable(qtbot, window):
    from gradviz.app.training import install
    from gradviz.app.training.plot_widget import AXIS_W, MIN_H, MIN_W
    from gradviz.app.training.smoothing import ema

    panel = install(window)
    panel.actions["show"].trigger()
    open_and_wait(qtbot, window, MLP)
    plots = panel.plots
    for plot in plots.plots:
        assert plot.minimumWidth() >= MIN_W and plot.minimumHeight() >= MIN_H
        title = plot.getPlotItem().titleLabel.item                    # the whole title, not cut
        assert title.boundingRect().width() <= MIN_W - AXIS_W, title.toPlainText()
        assert plot.getPlotItem().getAxis("left").width() == AXIS_W      # labels never spill over
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) >= 60, timeout=WAIT_MS)
    # the Inspector and the Training controls are both in view while training runs
    training_dock = next(d for d in window.docks.docks if d.windowTitle() == "Training")
    assert window.inspector_dock.isVisible() and training_dock.isVisible()
    assert training_dock not in window.tabifiedDockWidgets(window.inspector_dock)
    assert window.inspector.height() >= 0.4 * window.height()          # the Inspector keeps its column
    # the plots open at the bottom area's default height, not half the window: the graph keeps its room
    plots_dock = next(d for d in window.docks.docks if d.windowTitle() == "Training plots")
    qtbot.waitUntil(lambda: plots_dock.height() <= window.docks.bottom_height() + 10, timeout=5000)
    assert window.view.height() >= 0.5 * window.height()
    panel.stop()
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=WAIT_MS)
    qtbot.waitUntil(lambda: len(panel.history) == panel.worker.step_index, timeout=5000)
    plots.smoothing.setValue(90)
    plots.refresh(force=True)
    loss = panel.history.column("loss")
    x, y = plots.loss_smooth.getData()
    assert len(y) == len(loss) and np.allclose(y, ema(loss, 0.9), equal_nan=True)
    x, raw = plots.loss_curve.getData()
    assert np.allclose(raw, loss)                                       # the raw curve stays, faint
    assert plots.loss_curve.opts["pen"].color().alpha() < 255
    plots.set_log_loss(True)
    assert plots.loss_plot.getPlotItem().ctrl.logYCheck.isChecked() and plots.log_loss.isChecked()
    plots.log_loss.setChecked(False)
    assert not plots.loss_plot.getPlotItem().ctrl.logYCheck.isChecked()
    panel.shutdown()


def test_value_axis_labels_never_overlap(qtbot):
    """A log axis over less than a decade (a broken model's flat gradient norms, 0.05-0.5) labels
    pyqtgraph's minor ticks 0.06 ... 0.09 a few pixels apart: the plot's axis keeps them apart."""
    import pyqtgraph as pg
    from PySide6.QtGui import QPainter, QPixmap

    from gradviz.app.training.plot_widget import MIN_H, Plot

    for lo, hi, log in ((0.05, 0.5, True), (4e-4, 2e-2, True), (1e-3, 3.0, True), (1.05, 1.15, False)):
        plot = Plot("grad norm", log_y=log)
        qtbot.addWidget(plot)
        plot.resize(260, MIN_H)
        plot.show()
        qtbot.waitExposed(plot)
        x = np.arange(600)
        plot.plot(x, lo + (hi - lo) * (0.5 + 0.5 * np.sin(x / 7.0)))
        qtbot.wait(30)
        axis = plot.getPlotItem().getAxis("left")
        pm = QPixmap(axis.size().toSize())
        painter = QPainter(pm)
        try:
            texts = axis.generateDrawSpecs(painter)[2]
            stock = pg.AxisItem.generateDrawSpecs(axis, painter)[2]    # pyqtgraph's own choice
        finally:
            painter.end()
        rects = [r for r, _, _ in texts]
        assert len(rects) >= 2                                       # the axis still says its range
        assert not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1:])
        if (lo, hi) == (0.05, 0.5):                                  # what was seen: overlapping labels
            srects = [r for r, _, _ in stock]
            assert any(a.intersects(b) for i, a in enumerate(srects) for b in srects[i + 1:])
