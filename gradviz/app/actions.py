"""The window's own actions, each with its one shortcut (no other widget owns these keys).

``WindowActions`` makes them; ``MainWindow`` connects them to what they do and ``menus``
puts them in the menu bar, the toolbar and the graph's context menu. The canvas keys
(F, +, −, 1, Ctrl+0) are these actions' shortcuts: window-wide, so they work wherever
the focus is except in a text field, which keeps its typed characters.
"""
from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QStyle, QWidget


def make_action(parent: QWidget, text: str, shortcut=None, tip: str = "", icon=None,
                checkable: bool = False) -> QAction:
    act = QAction(text, parent)
    if shortcut:
        keys = shortcut if isinstance(shortcut, (list, tuple)) else [shortcut]
        act.setShortcuts([QKeySequence(k) for k in keys])
    if tip:
        act.setToolTip(tip)
        act.setStatusTip(tip)
    if icon is not None:
        act.setIcon(icon)
    if checkable:
        act.setCheckable(True)
        act.setChecked(True)
    return act


class WindowActions:
    """Every action of the window itself (extensions add theirs with ``add_action``)."""

    def __init__(self, parent: QWidget) -> None:
        icon = parent.style().standardIcon
        a = make_action
        self.open = a(parent, "&Open…", QKeySequence.Open, "Open a model script", icon(QStyle.SP_DialogOpenButton))
        self.reload = a(parent, "&Reload", "Ctrl+R", "Trace the script again", icon(QStyle.SP_BrowserReload))
        self.export = a(parent, "&Export graph…", "Ctrl+E", "Save the graph as PNG, SVG or PDF",
                        icon(QStyle.SP_DialogSaveButton))
        self.copy = a(parent, "&Copy image", "Ctrl+Shift+C", "Copy the graph image")
        self.quit = a(parent, "&Quit", QKeySequence.Quit)
        self.find = a(parent, "&Find…", QKeySequence.Find, "Find an op, parameter or module (Ctrl+F)")
        self.find_next = a(parent, "Find &next", "F3")
        self.find_previous = a(parent, "Find &previous", "Shift+F3")
        self.clear_selection = a(parent, "Clear selection")
        self.fit = a(parent, "&Fit", "F", "Fit the whole graph in the window")
        self.actual = a(parent, "Actual &size", ["Ctrl+0", "1"], "Zoom 1:1")
        self.zoom_in = a(parent, "Zoom &in", ["+", "=", "Ctrl++"], "Zoom in")
        self.zoom_out = a(parent, "Zoom &out", ["-", "Ctrl+-"], "Zoom out")
        self.expand_all = a(parent, "&Expand all modules", "Ctrl+Shift+E", "Show every op")
        self.collapse_all = a(parent, "&Collapse all modules", "Ctrl+Shift+W", "One box per top-level module")
        self.reset_grouping = a(parent, "&Default grouping", "Ctrl+Shift+D", "Group modules to about 200 boxes")
        self.minimap = a(parent, "&Overview map", checkable=True)
        self.legend = a(parent, "&Legend", checkable=True)
        self.about = a(parent, "&About gradviz")
        for act, text in ((self.expand_all, "Expand all"), (self.reset_grouping, "Group"),
                          (self.zoom_in, "Zoom +"), (self.zoom_out, "Zoom −"), (self.actual, "1:1"),
                          (self.find, "Find"), (self.export, "Export")):
            act.setIconText(text)

    def all(self) -> list[QAction]:
        return [v for v in vars(self).values() if isinstance(v, QAction)]
