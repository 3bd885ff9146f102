"""The Attribution panel of the window: ``install(host)`` (see ``app/extensions.py``).

Adds the "Attribution" dock (bottom) and "Input attribution…" in the Diagnose menu.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction

from gradviz.app.attribution.panel import AttributionPanel
from gradviz.app.contract import PanelHost

__all__ = ["install", "AttributionPanel"]


def install(host: PanelHost) -> dict:
    panel = AttributionPanel(host)
    dock = host.add_dock("Attribution", panel, Qt.BottomDockWidgetArea)
    action = QAction("Input attribution…", dock)
    action.setToolTip("Saliency, gradient × input and integrated gradients for the script's batch")

    def show() -> None:
        dock.show()
        dock.raise_()

    action.triggered.connect(show)
    host.add_action("Diagnose", action)
    return {"panel": panel, "dock": dock, "action": action}
