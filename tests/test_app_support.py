"""Shared helpers for the window tests (pytest-qt, offscreen; the ``window`` fixture is in conftest). No tests here."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
MLP = SAMPLES / "mlp_digits.py"
TRANSFORMER = SAMPLES / "transformer.py"
WAIT_MS = 90_000


def open_and_wait(qtbot, win, path) -> None:
    with qtbot.waitSignal(win.graphShown, timeout=WAIT_MS):
        win.open_script(path)


def change_view(qtbot, win, action) -> None:
    """Run ``action`` (which re-groups the graph) and wait until the new view is shown."""
    with qtbot.waitSignal(win.graphShown, timeout=WAIT_MS):
        action()


def load_module(path: Path):
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"_oracle_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oracle_grads(path: Path, seed: int = 0) -> dict:
    """Parameter gradients by plain torch: same seed and batch as ``TraceOptions`` defaults."""
    import torch
    from torch import nn

    module = load_module(path)
    torch.manual_seed(seed)
    model = module.model if isinstance(module.model, nn.Module) else module.model()
    inputs, targets = module.batch(0)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    loss = module.loss_fn(model(*inputs), targets)
    loss.backward()
    return {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}


def view_center_scene(win):
    vp = win.view.viewport().rect()
    return win.view.mapToScene(vp.center())


@pytest.fixture
def full(qtbot, tmp_path):
    """The whole window, every extension installed, 1400x900, settings in a temporary file."""
    from PySide6.QtCore import QSettings

    from gradviz.app.main_window import MainWindow

    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), extensions=True)
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.training_panel.shutdown()
    win.shutdown()
