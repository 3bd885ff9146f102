"""A menu action that brings a panel's dock to the front, and a dock grown to show a new result
(the panels' install functions and the views' panels share them)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget


def show_dock_action(dock: QDockWidget, text: str, tooltip: str) -> QAction:
    action = QAction(text, dock)
    action.setToolTip(tooltip)

    def show() -> None:
        dock.show()
        dock.raise_()

    action.triggered.connect(show)
    return action


def grow_dock(panel: QWidget, wanted: int, share: float = 0.5) -> None:
    """Grow the dock holding ``panel`` to ``wanted`` pixels high, at most ``share`` of the window,
    never shrinking it. A docked panel opens a quarter of the window high: right for its
    controls, too small for the figure or drawings a result brings (an image's heatmap showed
    its top rows, two graphs side by side were 80 px high)."""
    dock, win = panel.parentWidget(), panel.window()
    while dock is not None and not isinstance(dock, QDockWidget):
        dock = dock.parentWidget()
    if dock is None or dock.isFloating() or not dock.isVisible() or not isinstance(win, QMainWindow):
        return
    if win.dockWidgetArea(dock) not in (Qt.BottomDockWidgetArea, Qt.TopDockWidgetArea):
        return
    wanted = min(int(wanted), int(win.height() * share))
    if wanted > dock.height():
        win.resizeDocks([dock], [wanted], Qt.Vertical)
