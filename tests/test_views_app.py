"""The views' panels on the real window (pytest-qt): Attribution, the failing forward, cut branches, Compare."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_app_support import MLP, SAMPLES, TRANSFORMER, WAIT_MS, load_module, open_and_wait

from gradviz.app import attribution


@pytest.fixture
def attr(window):
    return attribution.install(window)["panel"]


def _run(qtbot, panel, method="saliency", target="loss", steps=50):
    panel.method.setCurrentIndex(panel.method.findData(method))
    panel.target.setCurrentText(target)
    panel.steps.setValue(steps)
    with qtbot.waitSignal(panel.finished, timeout=WAIT_MS):
        panel.run()
    return panel.result


def _oracle_saliency(path):
    module = load_module(path)
    torch.manual_seed(0)
    model = module.model().eval()
    inputs, targets = module.batch(0)
    x = inputs.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(module.loss_fn(model(x), targets), [x])
    return g.abs().numpy()


def test_attribution_panel_follows_the_documents(qtbot, window, attr):
    open_and_wait(qtbot, window, MLP)
    result = _run(qtbot, attr, "saliency")
    np.testing.assert_allclose(result.inputs[0].attribution, _oracle_saliency(MLP), rtol=1e-5, atol=1e-9)
    assert window.document.parts["attribution"] is result
    assert attr.figure.height() > 200 and attr.example.maximum() == 63
    assert "eval mode" in attr.status.text() and "not trained here" in attr.status.text()
    # tooltips name what is under the pointer: the 8x8 map of the 64 features
    attr.figure.repaint()
    assert any(h.text.startswith("feature") for h in attr.figure.hits)
    attr.example.setValue(5)
    assert attr.figure.example == 5
    attr.whole_batch.setChecked(True)
    assert attr.figure.example is None

    ig = _run(qtbot, attr, "ig", steps=64)
    assert ig.completeness.ok and "Completeness holds" in attr.status.text()

    # another script: nothing of the MLP's attribution stays
    open_and_wait(qtbot, window, TRANSFORMER)
    assert attr.result is None and attr.figure.height() == 0 and "attribution" not in window.document.parts
    tokens = _run(qtbot, attr, "saliency", target="3")
    assert tokens.inputs[0].kind == "tokens" and tokens.inputs[0].through == "tok_emb"


def test_a_late_attribution_never_lands_in_the_next_script(qtbot, window, attr):
    open_and_wait(qtbot, window, MLP)
    attr.method.setCurrentIndex(attr.method.findData("ig"))
    attr.steps.setValue(2000)
    job = attr.run()
    qtbot.waitUntil(lambda: attr.progress.maximum() > 1, timeout=WAIT_MS)   # it is running
    open_and_wait(qtbot, window, SAMPLES / "cnn.py")
    qtbot.waitUntil(lambda: not job.active, timeout=WAIT_MS)
    assert attr.result is None and "attribution" not in window.document.parts
    assert attr.run_button.isEnabled()


def test_attribution_needs_a_script(qtbot, window, attr):
    assert attr.run() is None and "Open a model script" in attr.status.text()
    open_and_wait(qtbot, window, MLP)
    attr.baseline.setCurrentText("middle")
    assert attr.run() is None and "baseline" in attr.status.text()
