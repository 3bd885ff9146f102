"""Live training in the window: a Training dock, plots dock and Run menu actions.

``install(window)`` is called by the main window (see ``gradviz/app/extensions.py``).
"""
from __future__ import annotations

from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QAction, QKeySequence

from gradviz.app.training.history import History
from gradviz.app.training.panel import CloseGuard, TrainingPanel
from gradviz.app.training.plots import TrainingPlots

__all__ = ["install", "TrainingPanel", "TrainingPlots", "History"]


def install(window) -> TrainingPanel:
    history = History()
    plots = TrainingPlots(history)
    panel = TrainingPanel(window, history, plots)
    window.training_panel = panel
    dock = window.add_dock("Training", panel, Qt.RightDockWidgetArea)
    plots_dock = window.add_dock("Training plots", plots, Qt.BottomDockWidgetArea)
    dock.hide()
    plots_dock.hide()

    def show_docks() -> None:
        for d in (dock, plots_dock):
            d.show()
            d.raise_()

    def action(text: str, slot, shortcut: str, tip: str) -> QAction:
        act = QAction(text, window)
        act.setShortcut(QKeySequence(shortcut))
        act.setToolTip(tip)
        act.setStatusTip(tip)
        act.triggered.connect(lambda _=False: slot())
        window.add_action("Run", act)
        return act

    def start() -> None:
        show_docks()
        panel.start()

    def step() -> None:
        show_docks()
        panel.step()

    panel.actions = {
        "start": action("&Start training", start, "F5", "Train the current script (flat out)"),
        "pause": action("&Pause", panel.pause, "F6", "Pause training after the current step"),
        "resume": action("&Resume", panel.resume, "Shift+F6", "Resume training"),
        "step": action("S&tep", step, "F10", "One training step"),
        "stop": action("St&op", panel.stop, "Shift+F5", "Stop training"),
        "reset": action("Rese&t model", panel.reset, "Ctrl+Shift+F5", "Re-create the model and optimizer"),
        "export": action("&Export training CSV…", panel.export_csv, "Ctrl+Shift+S",
                         "Save the training history as CSV"),
        "show": action("Training &panels", show_docks, "Ctrl+Shift+T", "Show the Training panels"),
    }

    selected = getattr(window, "nodeSelected", None)
    if selected is not None:
        selected.connect(panel.node_selected)
    changed = getattr(window, "graphChanged", None)
    if changed is not None:
        def graph_changed(_graph) -> None:
            # a different script: the running model no longer matches the graph
            script = window.current_script() if hasattr(window, "current_script") else None
            if panel.is_running() and script != getattr(panel, "_script", None):
                panel.stop()
        changed.connect(graph_changed)
    guard = CloseGuard(panel, window)
    window.installEventFilter(guard)
    panel._close_guard = guard
    app = QCoreApplication.instance()
    if app is not None:
        app.aboutToQuit.connect(panel.shutdown)
    return panel
