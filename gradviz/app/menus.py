"""The menu bar and the toolbar. ``Menus.build`` creates the window's actions and keeps
them on the window as ``act_*`` (extensions and tests use some: ``act_fit``...);
``Menus.menu(name)`` finds or makes a top-level menu for ``window.add_action``."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu, QStyle, QToolBar

from gradviz.app.recent_files import RecentFiles

MENUS = ["File", "Edit", "View", "Run", "Diagnose", "Help"]


class Menus:
    def __init__(self, window) -> None:
        self.window = window
        self.menus: dict[str, QMenu] = {}

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

    def action(self, text: str, slot, shortcut=None, tip: str = "", icon=None) -> QAction:
        act = QAction(text, self.window)
        if shortcut:
            if isinstance(shortcut, (list, tuple)):
                act.setShortcuts([QKeySequence(s) for s in shortcut])
            else:
                act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setToolTip(tip)
            act.setStatusTip(tip)
        if icon is not None:
            act.setIcon(icon)
        act.triggered.connect(lambda _=False: slot())
        return act

    def build(self) -> None:
        for name in ("File", "Edit", "View", "Help"):
            self.menu(name)
        self._file()
        self._edit()
        self._view()
        self.menus["Help"].addAction(self.action("&About gradviz", self.window.files.about))
        self._toolbar()

    def _file(self) -> None:
        w, files, icon = self.window, self.window.files, self.window.style().standardIcon
        f = self.menus["File"]
        w.act_open = self.action("&Open…", files.open_dialog, QKeySequence.Open, "Open a model script",
                                 icon(QStyle.SP_DialogOpenButton))
        f.addAction(w.act_open)
        w.recent = RecentFiles(f.addMenu("Open &recent"), w.settings, w)
        w.recent.chosen.connect(w.open_script)
        w.act_reload = self.action("&Reload", w.reload, "Ctrl+R", "Trace the script again",
                                   icon(QStyle.SP_BrowserReload))
        f.addAction(w.act_reload)
        f.addSeparator()
        w.act_export = self.action("&Export graph…", files.export_dialog, "Ctrl+E",
                                   "Save the whole graph as PNG, SVG or PDF", icon(QStyle.SP_DialogSaveButton))
        f.addAction(w.act_export)
        w.act_copy = self.action("&Copy image", files.copy_image, "Ctrl+Shift+C", "Copy the graph image")
        f.addAction(w.act_copy)
        f.addSeparator()
        f.addAction(self.action("&Quit", w.close, QKeySequence.Quit))

    def _edit(self) -> None:
        w = self.window
        e = self.menus["Edit"]
        w.act_find = self.action("&Find…", w.search.open_bar, QKeySequence.Find,
                                 "Find an op, parameter or module (Ctrl+F)")
        e.addAction(w.act_find)
        e.addAction(self.action("Find &next", w.search.next, "F3"))
        e.addAction(self.action("Find &previous", w.search.previous, "Shift+F3"))
        e.addSeparator()
        e.addAction(self.action("Clear selection", lambda: w.select_nodes([])))

    def _view(self) -> None:
        w, view = self.window, self.window.view
        v = self.menus["View"]
        w.act_fit = self.action("&Fit", view.fit, "F", "Fit the graph in the window")
        w.act_actual = self.action("Actual &size", view.actual_size, ["Ctrl+0", "1"], "Zoom 1:1")
        w.act_zoom_in = self.action("Zoom &in", view.zoom_in, ["+", "Ctrl++"], "Zoom in")
        w.act_zoom_out = self.action("Zoom &out", view.zoom_out, ["-", "Ctrl+-"], "Zoom out")
        for a in (w.act_fit, w.act_actual, w.act_zoom_in, w.act_zoom_out):
            v.addAction(a)
        v.addSeparator()
        w.act_expand_all = self.action("&Expand all modules", w.expand_all, "Ctrl+Shift+E", "Show every op")
        w.act_collapse_all = self.action("&Collapse all modules", w.collapse_all, "Ctrl+Shift+W",
                                         "One box per top-level module")
        w.act_reset_grouping = self.action("&Default grouping", w.reset_grouping, "Ctrl+Shift+D",
                                           "Group modules to about 200 boxes")
        for a in (w.act_expand_all, w.act_collapse_all, w.act_reset_grouping):
            v.addAction(a)
        v.addSeparator()
        overlays = w.overlays
        w.act_minimap = QAction("&Overview map", w, checkable=True, checked=True)
        w.act_minimap.toggled.connect(overlays.set_minimap_visible)
        v.addAction(w.act_minimap)
        if overlays.legend is not None:
            w.act_legend = QAction("&Legend", w, checkable=True, checked=True)
            w.act_legend.toggled.connect(overlays.set_legend_visible)
            v.addAction(w.act_legend)
        panels = v.addMenu("&Panels")
        for d in w.docks.docks:
            panels.addAction(d.toggleViewAction())
        w.docks.panels_menu = panels

    def _toolbar(self) -> None:
        w = self.window
        tb = QToolBar("Main", w)
        tb.setObjectName("mainToolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonTextOnly)
        groups = [(w.act_open, w.act_reload), (w.act_fit, w.act_zoom_in, w.act_zoom_out, w.act_actual),
                  (w.act_expand_all, w.act_reset_grouping), (w.act_find, w.act_export)]
        for i, group in enumerate(groups):
            if i:
                tb.addSeparator()
            for a in group:
                tb.addAction(a)
        for act, text in ((w.act_expand_all, "Expand all"), (w.act_reset_grouping, "Group"),
                          (w.act_zoom_in, "Zoom +"), (w.act_zoom_out, "Zoom −"), (w.act_actual, "1:1"),
                          (w.act_find, "Find"), (w.act_export, "Export")):
            act.setIconText(text)
        w.addToolBar(tb)
        w.toolbar = tb
