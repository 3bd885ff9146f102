"""The menu bar and the toolbar, laid out from ``WindowActions``; ``Menus.menu(name)`` finds
or makes a top-level menu (for ``add_action`` of the extension contract)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QMenu, QToolBar

from gradviz.app.actions import WindowActions

MENUS = ["File", "Edit", "View", "Run", "Diagnose", "Help"]


class Menus:
    def __init__(self, window: QMainWindow, acts: WindowActions) -> None:
        self.window = window
        self.menus: dict[str, QMenu] = {}
        for name in ("File", "Edit", "View", "Help"):
            self.menu(name)
        f, e, v = self.menus["File"], self.menus["Edit"], self.menus["View"]
        f.addAction(acts.open)
        self.recent_menu = f.addMenu("Open &recent")
        f.addAction(acts.reload)
        f.addSeparator()
        f.addAction(acts.export)
        f.addAction(acts.copy)
        self._quit_separator = f.addSeparator()
        f.addAction(acts.quit)
        for act in (acts.find, acts.find_next, acts.find_previous):
            e.addAction(act)
        e.addSeparator()
        e.addAction(acts.clear_selection)
        for act in (acts.fit, acts.actual, acts.zoom_in, acts.zoom_out):
            v.addAction(act)
        v.addSeparator()
        for act in (acts.expand_all, acts.collapse_all, acts.reset_grouping):
            v.addAction(act)
        v.addSeparator()
        v.addAction(acts.minimap)
        v.addAction(acts.legend)
        self.panels_menu = v.addMenu("&Panels")
        self.menus["Help"].addAction(acts.about)
        self.toolbar = self._toolbar(acts)

    def menu(self, name: str) -> QMenu:
        """The top-level menu ``name``, made if needed (Help stays last)."""
        if name not in self.menus:
            bar = self.window.menuBar()
            menu = QMenu(f"&{name}", self.window)
            if name != "Help" and "Help" in self.menus:
                bar.insertMenu(self.menus["Help"].menuAction(), menu)
            else:
                bar.addMenu(menu)
            self.menus[name] = menu
        return self.menus[name]

    def add(self, menu: str, action: QAction) -> None:
        """An extension's action: File actions go above Quit, others at the end of their menu."""
        if menu == "File":
            self.menus["File"].insertAction(self._quit_separator, action)
        else:
            self.menu(menu).addAction(action)

    def _toolbar(self, acts: WindowActions) -> QToolBar:
        tb = QToolBar("Main", self.window)
        tb.setObjectName("mainToolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonTextOnly)
        groups = [(acts.open, acts.reload), (acts.fit, acts.zoom_in, acts.zoom_out, acts.actual),
                  (acts.expand_all, acts.reset_grouping), (acts.find, acts.export)]
        for i, group in enumerate(groups):
            if i:
                tb.addSeparator()
            for a in group:
                tb.addAction(a)
        self.window.addToolBar(tb)
        return tb
