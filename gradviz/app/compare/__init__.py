"""The Compare panel of the window: ``install(host)`` (see ``app/extensions.py``).

Adds the "Compare" dock and "Compare steps or runs…" in the Run menu.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from gradviz.app.compare.panel import ComparePanel
from gradviz.app.contract import PanelHost
from gradviz.app.dock_action import show_dock_action

__all__ = ["install", "ComparePanel"]


def install(host: PanelHost) -> dict:
    panel = ComparePanel(host)
    dock = host.add_dock("Compare", panel, Qt.BottomDockWidgetArea)
    action = show_dock_action(dock, "Compare steps or runs…", "Two steps of a run, or two runs: side by side, "
                              "or coloured by the ratio of gradient norms")
    host.add_action("Run", action)
    return {"panel": panel, "dock": dock, "action": action}
