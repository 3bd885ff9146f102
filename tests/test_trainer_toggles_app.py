"""The training panel's adaptive clipping and label smoothing (pytest-qt, offscreen): the
settings reach the trainer while it runs, and the per-parameter plot draws the norms after
clipping (dashed) where clipping shrank them."""
from __future__ import annotations

import numpy as np
import pytest

import gradviz.app  # noqa: F401  (PySide6 workaround first)

from conftest import SAMPLES

WAIT_MS = 120_000


@pytest.fixture
def win(qtbot, window):
    from gradviz.app.training import install

    panel = window.training_panel = install(window)
    panel.actions["show"].trigger()
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(SAMPLES / "mlp_digits.py")
    yield window
    panel.shutdown()


def test_toggles_reach_the_trainer_and_the_plot(qtbot, win):
    panel = win.training_panel
    assert panel.config().adaptive_clip is None and panel.config().label_smoothing == 0.0
    panel.start()
    qtbot.waitUntil(lambda: len(panel.history) >= 5, timeout=WAIT_MS)
    plots = panel.plots
    name = plots.names[0]
    plots.refresh(force=True)
    assert np.isnan(plots.clip_curves[name].yData).all()          # no clipping yet: no dashed curve
    panel.agc.setValue(0.01)                                       # applied between two steps
    panel.label_smoothing.setValue(0.1)
    qtbot.waitUntil(lambda: panel.worker.config.adaptive_clip == 0.01, timeout=10_000)
    start = panel.worker.step_index
    qtbot.waitUntil(lambda: len(panel.history) >= start + 20, timeout=WAIT_MS)
    panel.pause()
    qtbot.waitUntil(lambda: panel.state == "paused", timeout=10_000)
    h = panel.history
    steps = h.column("step")
    later = steps > start + 1
    pre, post = h.column("param_norms")[later], h.column("param_norms_clipped")[later]
    assert (post <= pre * (1 + 1e-6)).all() and (post < pre * 0.99).any()
    # the dashed curve is the post-clip column, drawn where clipping shrank the gradient
    plots.refresh(force=True)
    y = plots.clip_curves[name].yData
    assert np.isfinite(y).any()
    assert np.allclose(y[np.isfinite(y)], h.column("param_norms_clipped")[:, 0][np.isfinite(y)], rtol=1e-6)
    assert "after clipping" in plots.param_plot.toolTip()      # (the title must fit the plot: window's change)
    k = int(np.flatnonzero(np.isfinite(y))[-1])                   # hovering a clipped step: "pre → post"
    text, _ = plots.param_plot.describe(float(steps[k]))
    assert f"{name}: " in text and "→" in text
    cfg = panel.worker.config
    assert cfg.label_smoothing == pytest.approx(0.1) and cfg.adaptive_clip == pytest.approx(0.01)
