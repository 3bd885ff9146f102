"""The Compare panel of the window: ``install(host)`` (see ``app/extensions.py``).

Adds the "Compare" dock and "Compare steps or runs…" in the Run menu.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction

from gradviz.app.compare.panel import ComparePanel
from gradviz.app.contract import PanelHost

__all__ = ["install", "ComparePanel"]


def install(host: PanelHost) -> dict:
    panel = ComparePanel(host)
    dock = host.add_dock("Compare", panel, Qt.BottomDockWidgetArea)
    action = QAction("Compare steps or runs…", dock)
    action.setToolTip("Two steps of a run, or two runs: side by side, or coloured by the ratio of gradient norms")

    def show() -> None:
        dock.show()
        dock.raise_()

    action.triggered.connect(show)
    host.add_action("Run", action)
    return {"panel": panel, "dock": dock, "action": action}
