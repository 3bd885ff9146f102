"""The Attribution panel of the window: ``install(host)`` (see ``app/extensions.py``).

Adds the "Attribution" dock (bottom) and "Input attribution…" in the Diagnose menu.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from gradviz.app.attribution.panel import AttributionPanel
from gradviz.app.contract import PanelHost
from gradviz.app.dock_action import show_dock_action

__all__ = ["install", "AttributionPanel"]


def install(host: PanelHost) -> dict:
    panel = AttributionPanel(host)
    dock = host.add_dock("Attribution", panel, Qt.BottomDockWidgetArea)
    action = show_dock_action(dock, "Input attribution…",
                              "Saliency, gradient × input and integrated gradients for the script's batch")
    host.add_action("Diagnose", action)
    return {"panel": panel, "dock": dock, "action": action}
