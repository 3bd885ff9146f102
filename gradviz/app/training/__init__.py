"""Live training in the window: the Training dock (controls), the Training plots dock and
the Run menu. ``install(host)`` is called by ``MainWindow.__init__`` (``app/extensions.py``).

The Training dock sits below the Modules tree (never tabbed over the Inspector): while
training runs, the selected node's live statistics and the controls are both in view, and
the Inspector keeps its whole column.
"""
from __future__ import annotations

from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QVBoxLayout, QWidget

from gradviz.app.contract import TrainingHost
from gradviz.app.training.history import History
from gradviz.app.training.panel import TrainingPanel

__all__ = ["install", "TrainingPanel", "TrainingPlots", "History"]


def __getattr__(name: str):
    if name == "TrainingPlots":        # pyqtgraph loads with it: only when asked for
        from gradviz.app.training.plots import TrainingPlots

        return TrainingPlots
    raise AttributeError(name)


def install(host: TrainingHost) -> TrainingPanel:
    history = History()
    slot = QWidget()              # the plots go in when first needed (TrainingPanel.plots)
    slot.setObjectName("trainingPlotsSlot")
    QVBoxLayout(slot).setContentsMargins(0, 0, 0, 0)
    panel = TrainingPanel(host, history, plots_body=slot)
    dock = host.add_dock("Training", panel, Qt.LeftDockWidgetArea, tabbed=False)
    plots_dock = host.add_dock("Training plots", slot, Qt.BottomDockWidgetArea)
    dock.hide()
    plots_dock.hide()
    # shown by the user (View menu, a tab) or by Start: the plots are made before it paints
    plots_dock.visibilityChanged.connect(lambda visible: visible and panel.plots)

    def show_docks() -> None:
        for d in (dock, plots_dock):
            d.show()
            d.raise_()

    def action(text: str, slot, shortcut: str, tip: str) -> QAction:
        act = QAction(text, dock)
        act.setShortcut(QKeySequence(shortcut))
        act.setToolTip(tip)
        act.setStatusTip(tip)
        act.triggered.connect(lambda _=False: slot())
        host.add_action("Run", act)
        return act

    def start() -> None:
        show_docks()
        panel.start()

    def step() -> None:
        show_docks()
        panel.step()

    panel.set_actions({
        "start": action("&Start training", start, "F5", "Train the current script (flat out)"),
        "pause": action("&Pause", panel.pause, "F6", "Pause training after the current step"),
        "resume": action("&Resume", panel.resume, "Shift+F6", "Resume training"),
        "step": action("S&tep", step, "F10", "One training step"),
        "stop": action("St&op", panel.stop, "Shift+F5", "Stop training"),
        "reset": action("Rese&t model", panel.reset, "Ctrl+Shift+F5", "Re-create the model and optimizer"),
        "export": action("&Export training CSV…", panel.export_csv, "Ctrl+Shift+S",
                         "Save the training history as CSV"),
        "show": action("Training &panels", show_docks, "Ctrl+Shift+T", "Show the Training panels"),
    })
    host.nodeSelected.connect(panel.node_selected)
    host.documentChanged.connect(panel.show_document)
    host.aboutToClose.connect(panel.shutdown)
    app = QCoreApplication.instance()
    if app is not None:
        app.aboutToQuit.connect(panel.shutdown)
    return panel
