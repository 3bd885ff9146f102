"""A menu action that brings a panel's dock to the front (the panels' install functions share it)."""
from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget


def show_dock_action(dock: QDockWidget, text: str, tooltip: str) -> QAction:
    action = QAction(text, dock)
    action.setToolTip(tooltip)

    def show() -> None:
        dock.show()
        dock.raise_()

    action.triggered.connect(show)
    return action
