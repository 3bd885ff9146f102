"""The gradviz main window: assembles the view, the panels and the menus, and offers
the extension contract of ``docs/ARCHITECTURE.md`` (``document``, ``graphChanged``,
``nodeSelected``, ``add_dock``, ``add_action``, ``select_nodes``, ``show_error``,
``set_node_norms``, ``mark_edges``, ``mark_nodes``, ``current_script``).

Work happens elsewhere: ``trace_worker`` traces and lays out off the UI thread,
``document`` holds the state, the panels show it. This class wires them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEvent, QPointF, QRectF, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (QApplication, QDockWidget, QFileDialog, QMainWindow, QMenu, QMessageBox,
                               QScrollArea, QToolBar, QVBoxLayout, QWidget)

import gradviz
from gradviz.app import scene_api
from gradviz.app.document import Document, TraceResult, ViewResult
from gradviz.app.error_panel import ErrorPanel
from gradviz.app.export_dialog import ask_and_export, export_graph
from gradviz.app.extensions import load_extensions
from gradviz.app.formatting import count
from gradviz.app.graph_view import GraphView
from gradviz.app.icon import app_icon
from gradviz.app.inspector_panel import InspectorPanel
from gradviz.app.minimap import Minimap
from gradviz.app.outline_panel import OutlinePanel
from gradviz.app.recent_files import RecentFiles
from gradviz.app.script_watcher import ReloadBar, ScriptWatcher
from gradviz.app.search_bar import SearchBar
from gradviz.app.selection import highlight_for, neighbour
from gradviz.app.status_bar import StatusBar
from gradviz.app.trace_worker import JobRunner, trace_job, view_job

MENUS = ["File", "Edit", "View", "Run", "Diagnose", "Help"]
AUTO_BOXES = 200
MAX_BOTTOM_MIN_H = 180   # bottom panels taller than this scroll instead of shrinking the graph


class MainWindow(QMainWindow):
    graphChanged = Signal(object)    # the new full graph (nx.DiGraph)
    nodeSelected = Signal(str)       # node id on screen, '' when nothing is selected
    graphShown = Signal()            # a (new or re-grouped) graph is on screen
    traceFailed = Signal(object)     # the exception of a failed load/trace
    busyChanged = Signal(bool)

    def __init__(self, settings: QSettings | None = None, extensions: bool = True) -> None:
        super().__init__()
        self.setWindowIcon(app_icon())
        self.setDockOptions(QMainWindow.AnimatedDocks | QMainWindow.AllowTabbedDocks)
        self.setAcceptDrops(True)
        self.settings = settings or QSettings()
        self.document = Document()
        self.selected = ""
        self._after_view: list[Callable[[], None]] = []
        self._menus: dict[str, QMenu] = {}
        self._docks: list[QDockWidget] = []
        self._sized = False

        # workers
        self.tracer = JobRunner("gradviz-trace", self)
        self.tracer.progress.connect(self._on_progress)
        self.tracer.finished.connect(self._on_traced)
        self.tracer.failed.connect(self._on_trace_failed)
        self.layouter = JobRunner("gradviz-layout", self)
        self.layouter.progress.connect(self._on_progress)
        self.layouter.finished.connect(self._on_view)
        self.layouter.failed.connect(self._on_layout_failed)

        # the view
        self.theme = scene_api.palette_theme(self.palette())
        scene_cls = scene_api.graph_scene_class()
        try:
            self.scene = scene_cls(self, theme=self.theme)
        except TypeError:
            self.scene = scene_cls(self)
        self.view = GraphView(self.scene)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.view.customContextMenuRequested.connect(self._context_menu)
        self.view.navigate.connect(self._navigate)
        self.view.cleared.connect(lambda: self.select_nodes([]))
        self.minimap = Minimap(self.view)
        self.legend = self._make_legend()
        self.view.viewportMoved.connect(self._place_overlays)
        self.scene.nodeClicked.connect(lambda nid: self.select_nodes([nid], center=False))
        self.scene.nodeDoubleClicked.connect(self._double_clicked)
        self.scene.backgroundClicked.connect(lambda: self.select_nodes([], center=False))
        self.search = SearchBar()
        self.search.set_source(lambda: (self.document.graph, self.document.order()))
        self.search.hitChosen.connect(self.reveal)
        self.search.closed.connect(self.view.setFocus)
        self.reload_bar = ReloadBar()
        self.reload_bar.reload.connect(self.reload)
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.reload_bar)
        lay.addWidget(self.search)
        lay.addWidget(self.view, 1)
        self.setCentralWidget(central)

        # panels
        self.outline = OutlinePanel()
        self.outline.expandToggled.connect(self._outline_toggled)
        self.outline.moduleActivated.connect(self._outline_activated)
        self.inspector = InspectorPanel()
        self.errors = ErrorPanel()
        self.errors.dismissed.connect(lambda: self.error_dock.hide())
        self.outline_dock = self.add_dock("Modules", self.outline, Qt.LeftDockWidgetArea)
        self.inspector_dock = self.add_dock("Inspector", self.inspector, Qt.RightDockWidgetArea)
        self.error_dock = self.add_dock("Errors", self.errors, Qt.BottomDockWidgetArea)
        self.error_dock.hide()
        self.resizeDocks([self.outline_dock, self.inspector_dock], [300, 340], Qt.Horizontal)

        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.watcher = ScriptWatcher(self)
        self.watcher.changed.connect(self.reload_bar.notify)
        self._build_menus()
        self._update_title()
        self.view.set_placeholder("Open a model script (File ▸ Open, Ctrl+O) or drop a .py file here.")
        self.extension_errors: list[tuple[str, str]] = []
        self.extensions: list[str] = []
        if extensions:
            self.extensions, self.extension_errors = load_extensions(self)
            for name, text in self.extension_errors:
                self.show_error(f"The extension {name} could not be installed.", details=text)

    # ------------------------------------------------------------------ contract
    def current_script(self) -> str | None:
        return str(self.document.path) if self.document.path else None

    def add_dock(self, title: str, widget: QWidget, area=Qt.RightDockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock-{title}")
        horizontal = area in (Qt.BottomDockWidgetArea, Qt.TopDockWidgetArea)
        if horizontal and widget.minimumSizeHint().height() > MAX_BOTTOM_MIN_H:
            # a tall panel must not push the graph away: let it scroll inside a shorter dock
            scroller = QScrollArea()
            scroller.setObjectName(f"scroll-{title}")
            scroller.setWidgetResizable(True)
            scroller.setFrameShape(QScrollArea.NoFrame)
            scroller.setWidget(widget)
            dock.setWidget(scroller)
        else:
            dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable
                         | QDockWidget.DockWidgetClosable)
        self.addDockWidget(area, dock)
        same = [d for d in self._docks if self.dockWidgetArea(d) == area and not d.isFloating()]
        if same and title != "Errors":
            self.tabifyDockWidget(same[0], dock)
            first = next((d for d in same if d is not getattr(self, "error_dock", None)), dock)
            first.raise_()   # the first panel of an area stays in front
        self._docks.append(dock)
        if self._menus:
            self._panels_menu.addAction(dock.toggleViewAction())
        return dock

    def add_action(self, menu: str, action: QAction) -> None:
        self._menu(menu).addAction(action)
        if action.parent() is None:
            action.setParent(self)

    def select_nodes(self, ids: list[str], center: bool = True) -> None:
        doc = self.document
        visible = doc.view_nodes(list(ids)) if doc.view is not None else []
        if not visible:
            self.selected = ""
            self.scene.clear_highlight()
            self.scene.clearSelection()
            self.inspector.show_summary(doc.graph)
            self.nodeSelected.emit("")
            return
        if len(visible) == 1:
            nid = visible[0]
            nodes, edges = highlight_for(doc.view, nid)
        else:
            nid = visible[0]
            nodes, edges = set(visible), set()
        self.selected = nid
        self.scene.highlight(nodes, edges)
        self.scene.blockSignals(True)
        self.scene.clearSelection()
        for v in visible:
            item = self.scene.node_item(v)
            if item is not None:
                item.setSelected(True)
        self.scene.blockSignals(False)
        if hasattr(self.scene, "_on_selection"):
            self.scene._on_selection()
        self.inspector.show_node(nid, doc.node(nid), doc.graph)
        if doc.view.nodes[nid].get("kind") == "group":
            self.outline.select_module(doc.view.nodes[nid].get("module", ""))
        if center:
            self.center_on(visible)
        self.nodeSelected.emit(nid)

    def show_error(self, error, details: str = "", title: str | None = None) -> None:
        self.errors.show_error(error, details, title)
        was_hidden = not self.error_dock.isVisible()
        self.error_dock.show()
        self.error_dock.raise_()
        if was_hidden and self.isVisible():
            self.resizeDocks([self.error_dock], [max(180, min(260, self.height() // 3))], Qt.Vertical)

    def set_node_norms(self, norms: dict) -> None:
        self.document.norms.update(norms)
        self.scene.set_norms(self.document.view_norms(norms))

    def mark_edges(self, edges: list[tuple[str, str]], style: str = "broken") -> None:
        self.document.marked_edges.setdefault(style, []).extend(edges)
        self.scene.mark_edges(self.document.view_edges(edges), style)

    def mark_nodes(self, ids: list[str], style: str = "nan-origin") -> None:
        self.document.marked_nodes.setdefault(style, []).extend(ids)
        self.scene.mark_nodes(self.document.view_nodes(ids), style)

    # ------------------------------------------------------------------ open / trace
    def open_script(self, path: str | Path) -> None:
        path = Path(path).expanduser().resolve()
        self.document.path = path
        self.recent.add(path) if path.is_file() else None
        self.reload_bar.hide()
        self.watcher.watch(path)
        self.layouter.cancel()
        self._after_view.clear()
        self._update_title()
        self.tracer.submit(trace_job(path, AUTO_BOXES))
        self._set_busy("loading script")

    def reload(self) -> None:
        if self.document.path is not None:
            self.open_script(self.document.path)

    def open_dialog(self) -> None:
        start = str(self.document.path.parent) if self.document.path else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self, "Open model script", start, "Model scripts (*.py);;All files (*)")
        if path:
            self.open_script(path)

    def is_busy(self) -> bool:
        return self.status.busy.isVisible()

    def _set_busy(self, phase: str | None) -> None:
        was = self.is_busy()
        self.status.set_busy(phase)
        if was != (phase is not None):
            self.busyChanged.emit(phase is not None)

    def _on_progress(self, gen: int, phase: str) -> None:
        runner = self.sender()
        if runner is None or runner.is_current(gen):
            self._set_busy(phase)

    def _on_traced(self, gen: int, result: TraceResult) -> None:
        if not self.tracer.is_current(gen):
            return
        self.document.set_trace(result)
        self.selected = ""
        self.error_dock.hide()
        self._set_busy(None)
        self._update_title()
        self.outline.set_modules(self.document.modules, self.document.expanded, self._color_scale())
        self._show_view(fit=True)
        self.inspector.show_summary(self.document.graph)
        self.graphChanged.emit(self.document.graph)
        self.nodeSelected.emit("")

    def _on_trace_failed(self, gen: int, exc: BaseException, tb: str) -> None:
        if not self.tracer.is_current(gen):
            return
        self._set_busy(None)
        self._update_title()
        self.show_error(exc, details=tb)
        if self.document.graph is None:
            self.view.set_placeholder(f"Could not open {self.document.path.name if self.document.path else 'the script'}"
                                      " — see the Errors panel.\nFix it and press Ctrl+R, or open another script.")
        self.statusBar().showMessage("trace failed — see the Errors panel", 8000)
        self.traceFailed.emit(exc)

    # ------------------------------------------------------------------ grouping
    def set_expanded(self, expanded: set[str], then: Callable[[], None] | None = None) -> None:
        """Re-collapse and re-lay out (off the UI thread); ``then`` runs once it is shown."""
        if self.document.graph is None:
            return
        self._after_view = [then] if then else []
        self.layouter.submit(view_job(self.document.graph, expanded))
        self._set_busy("layout")

    def expand(self, module: str, then=None) -> None:
        self.set_expanded(self.document.expanded_with(module), then or (lambda: self._focus_module(module)))

    def collapse(self, module: str, then=None) -> None:
        gid = f"group:{module}"
        self.set_expanded(self.document.expanded_without(module),
                          then or (lambda: self.select_nodes([gid], center=True)))

    def expand_all(self) -> None:
        self.set_expanded(self.document.all_modules())

    def collapse_all(self) -> None:
        self.set_expanded(set())

    def reset_grouping(self) -> None:
        from gradviz.core.grouping import auto_depth, expanded_to_depth

        if self.document.graph is not None:
            g = self.document.graph
            self.set_expanded(expanded_to_depth(g, auto_depth(g, AUTO_BOXES)))

    def reveal(self, nid: str) -> None:
        """Select ``nid`` (a full-graph id), expanding the groups that hide it."""
        doc = self.document
        if doc.view is None:
            return
        if nid in doc.view:
            self.select_nodes([nid], center=True)
            return
        needed = doc.expanded_to_show(nid)
        if needed != doc.expanded:
            self.set_expanded(needed, lambda: self.select_nodes([nid], center=True))
        else:
            self.select_nodes([nid], center=True)

    def _on_view(self, gen: int, result: ViewResult) -> None:
        if not self.layouter.is_current(gen):
            return
        self._set_busy(None)
        self.document.set_view(result)
        self.outline.set_expanded(self.document.expanded)
        keep = self.selected
        self._show_view(fit=False)
        callbacks, self._after_view = self._after_view, []
        if callbacks:
            for cb in callbacks:
                cb()
        elif keep:
            self.select_nodes([keep], center=False)

    def _on_layout_failed(self, gen: int, exc: BaseException, tb: str) -> None:
        if self.layouter.is_current(gen):
            self._set_busy(None)
            self.show_error(exc, details=tb, title="Layout failed")

    def _focus_module(self, module: str) -> None:
        doc = self.document
        members = [n for n, a in doc.view.nodes(data=True)
                   if a.get("module", "") == module or a.get("module", "").startswith(module + ".")]
        if members:
            self.center_on(members)

    def _show_view(self, fit: bool) -> None:
        doc = self.document
        self.scene.set_graph(doc.view, doc.layout)
        rng = doc.norm_range()
        if rng is not None:
            self.scene.set_color_range(*rng)
        if doc.norms:
            self.scene.set_norms(doc.view_norms(doc.norms))
        for style, edges in doc.marked_edges.items():
            self.scene.mark_edges(doc.view_edges(edges), style)
        for style, ids in doc.marked_nodes.items():
            self.scene.mark_nodes(doc.view_nodes(ids), style)
        self.view.set_placeholder(None)
        if fit:
            self.view.fit()
        self.minimap.render_scene()
        self._place_overlays()
        self.status.set_run(doc.run, doc.view.number_of_nodes())
        self.search.refresh()
        self.graphShown.emit()

    # ------------------------------------------------------------------ view helpers
    def center_on(self, ids: list[str]) -> None:
        lay = self.document.layout
        rect = QRectF()
        for n in ids:
            if lay is not None and n in lay.pos:
                (x, y), (w, h) = lay.pos[n], lay.size[n]
                rect = rect.united(QRectF(x - w / 2, y - h / 2, w, h))
        if rect.isNull():
            return
        self.view.center_on_rect(rect)

    def node_at(self, scene_pt: QPointF) -> str | None:
        if hasattr(self.scene, "node_at"):
            return self.scene.node_at(scene_pt)
        lay = self.document.layout
        if lay is None:
            return None
        x, y = scene_pt.x(), scene_pt.y()
        for n, (cx, cy) in lay.pos.items():
            w, h = lay.size[n]
            if abs(x - cx) <= w / 2 and abs(y - cy) <= h / 2:
                return n
        return None

    def _double_clicked(self, nid: str) -> None:
        attrs = self.document.node(nid)
        if attrs.get("kind") == "group":
            self.expand(attrs.get("module", ""))

    def _navigate(self, direction: str) -> None:
        doc = self.document
        if doc.view is None:
            return
        if not self.selected or self.selected not in doc.view:
            roots = [r for r in doc.view.graph.get("roots", []) if r in doc.view]
            if roots:
                self.select_nodes(roots[:1])
            return
        nxt = neighbour(doc.view, doc.layout, self.selected, direction)
        if nxt:
            self.select_nodes([nxt], center=False)
            (x, y), (w, h) = doc.layout.pos[nxt], doc.layout.size[nxt]
            self.view.ensureVisible(QRectF(x - w / 2, y - h / 2, w, h), 80, 80)

    def _context_menu(self, pos) -> None:
        nid = self.node_at(self.view.mapToScene(pos))
        menu = QMenu(self)
        doc = self.document
        if nid:
            attrs = doc.node(nid)
            self.select_nodes([nid], center=False)
            if attrs.get("kind") == "group":
                menu.addAction("Expand", lambda: self.expand(attrs.get("module", "")))
            parent = doc.parent_module(nid)
            if parent:
                act = menu.addAction(f"Collapse parent ({parent})", lambda: self.collapse(parent))
                act.setEnabled(parent in doc.expanded)
            if attrs.get("location"):
                from gradviz.app.source_link import open_location
                menu.addAction("Open source", lambda: open_location(attrs["location"]))
            menu.addAction("Copy id", lambda: QGuiApplication.clipboard().setText(nid))
            menu.addSeparator()
        menu.addAction(self.act_fit)
        menu.addAction(self.act_expand_all)
        menu.addAction(self.act_reset_grouping)
        menu.exec(self.view.mapToGlobal(pos))

    def _outline_toggled(self, module: str, expanded: bool) -> None:
        if expanded:
            self.expand(module)
        else:
            self.collapse(module)

    def _outline_activated(self, module: str) -> None:
        doc = self.document
        if doc.view is None:
            return
        gid = doc.visible_id(f"group:{module}") if module else None
        if gid and gid in doc.view:
            self.select_nodes([gid])
            return
        members = [n for n, a in doc.view.nodes(data=True)
                   if module == "" or a.get("module", "") == module or a.get("module", "").startswith(module + ".")]
        if members:
            self.select_nodes(members)

    # ------------------------------------------------------------------ overlays
    def _make_legend(self):
        cls = scene_api.color_bar_class()
        if cls is None:
            return None
        legend = cls(self.view, theme=self.theme, key=False)
        legend.setObjectName("legend")
        if hasattr(self.scene, "colorScaleChanged"):
            self.scene.colorScaleChanged.connect(legend.set_scale)
        legend.show()
        return legend

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.PaletteChange:
            theme = scene_api.palette_theme(self.palette())
            if theme != self.theme:
                self.theme = theme
                if hasattr(self.scene, "set_theme"):
                    self.scene.set_theme(theme)
                if self.legend is not None:
                    self.legend.set_theme(theme)
                self.inspector.histogram.apply_palette()
                self.minimap.render_scene()

    def _place_overlays(self) -> None:
        vp = self.view.viewport().geometry()
        if self.legend is not None:
            hint = self.legend.sizeHint()
            # the key-less legend's size hint is narrower than what it paints (render/legend.py)
            self.legend.resize(hint.width() + 70, hint.height())
            self.legend.move(vp.left() + 12, vp.bottom() - self.legend.height() - 10)
            self.legend.raise_()
            self.view.bottom_margin = self.legend.height() + 16 if self.legend.isVisible() else 0
        self.minimap.place()
        self.minimap.raise_()

    def _toggle_minimap(self, on: bool) -> None:
        self.minimap.wanted = on
        self.minimap.refresh()
        if not on:
            self.minimap.hide()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._sized:
            self._sized = True
            self.apply_default_dock_sizes()

    def apply_default_dock_sizes(self) -> None:
        """Side panels about 300 px wide, the bottom area at most a quarter of the window:
        the graph keeps most of the space."""
        side = [d for d in (self.outline_dock, self.inspector_dock) if d.isVisible()]
        if side:
            self.resizeDocks(side, [330 if d is self.outline_dock else 340 for d in side], Qt.Horizontal)
        bottom = [d for d in self._docks if self.dockWidgetArea(d) == Qt.BottomDockWidgetArea
                  and d.isVisible() and not d.isFloating()]
        if bottom:
            self.resizeDocks(bottom[:1], [max(160, min(240, self.height() // 4))], Qt.Vertical)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_overlays()

    def _color_scale(self):
        from gradviz.core.colors import LogColorScale

        return LogColorScale(*(self.document.norm_range() or (1e-6, 1.0)))

    # ------------------------------------------------------------------ menus
    def _menu(self, name: str) -> QMenu:
        if name not in self._menus:
            bar = self.menuBar()
            before = None
            if name != "Help" and "Help" in self._menus:
                before = self._menus["Help"].menuAction()
            menu = QMenu(f"&{name}", self)
            if before is not None:
                bar.insertMenu(before, menu)
            else:
                bar.addMenu(menu)
            self._menus[name] = menu
        return self._menus[name]

    def _action(self, text: str, slot, shortcut=None, tip: str = "", icon=None) -> QAction:
        act = QAction(text, self)
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

    def _build_menus(self) -> None:
        from PySide6.QtWidgets import QStyle

        style = self.style()
        for name in ("File", "Edit", "View", "Help"):
            self._menu(name)
        f = self._menus["File"]
        self.act_open = self._action("&Open…", self.open_dialog, QKeySequence.Open, "Open a model script",
                                     style.standardIcon(QStyle.SP_DialogOpenButton))
        f.addAction(self.act_open)
        self.recent = RecentFiles(f.addMenu("Open &recent"), self.settings, self)
        self.recent.chosen.connect(self.open_script)
        self.act_reload = self._action("&Reload", self.reload, "Ctrl+R", "Trace the script again",
                                       style.standardIcon(QStyle.SP_BrowserReload))
        f.addAction(self.act_reload)
        f.addSeparator()
        self.act_export = self._action("&Export graph…", self.export_dialog, "Ctrl+E",
                                       "Save the whole graph as PNG, SVG or PDF",
                                       style.standardIcon(QStyle.SP_DialogSaveButton))
        f.addAction(self.act_export)
        self.act_copy = self._action("&Copy image", self.copy_image, "Ctrl+Shift+C", "Copy the graph image")
        f.addAction(self.act_copy)
        f.addSeparator()
        f.addAction(self._action("&Quit", self.close, QKeySequence.Quit))

        e = self._menus["Edit"]
        self.act_find = self._action("&Find…", self.search.open_bar, QKeySequence.Find,
                                     "Find an op, parameter or module (Ctrl+F)")
        e.addAction(self.act_find)
        e.addAction(self._action("Find &next", self.search.next, "F3"))
        e.addAction(self._action("Find &previous", self.search.previous, "Shift+F3"))
        e.addSeparator()
        e.addAction(self._action("Clear selection", lambda: self.select_nodes([])))

        v = self._menus["View"]
        self.act_fit = self._action("&Fit", self.view.fit, "F", "Fit the graph in the window")
        self.act_actual = self._action("Actual &size", self.view.actual_size, ["Ctrl+0", "1"], "Zoom 1:1")
        self.act_zoom_in = self._action("Zoom &in", self.view.zoom_in, ["+", "Ctrl++"], "Zoom in")
        self.act_zoom_out = self._action("Zoom &out", self.view.zoom_out, ["-", "Ctrl+-"], "Zoom out")
        for a in (self.act_fit, self.act_actual, self.act_zoom_in, self.act_zoom_out):
            v.addAction(a)
        v.addSeparator()
        self.act_expand_all = self._action("&Expand all modules", self.expand_all, "Ctrl+Shift+E",
                                           "Show every op")
        self.act_collapse_all = self._action("&Collapse all modules", self.collapse_all, "Ctrl+Shift+W",
                                             "One box per top-level module")
        self.act_reset_grouping = self._action("&Default grouping", self.reset_grouping, "Ctrl+Shift+D",
                                               "Group modules to about 200 boxes")
        for a in (self.act_expand_all, self.act_collapse_all, self.act_reset_grouping):
            v.addAction(a)
        v.addSeparator()
        self.act_minimap = QAction("&Overview map", self, checkable=True, checked=True)
        self.act_minimap.toggled.connect(self._toggle_minimap)
        v.addAction(self.act_minimap)
        if self.legend is not None:
            self.act_legend = QAction("&Legend", self, checkable=True, checked=True)
            self.act_legend.toggled.connect(self.legend.setVisible)
            v.addAction(self.act_legend)
        self._panels_menu = v.addMenu("&Panels")
        for d in self._docks:
            self._panels_menu.addAction(d.toggleViewAction())

        h = self._menus["Help"]
        h.addAction(self._action("&About gradviz", self.about))

        tb = QToolBar("Main", self)
        tb.setObjectName("mainToolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonTextOnly)
        tb.addAction(self.act_open)
        tb.addAction(self.act_reload)
        tb.addSeparator()
        for a in (self.act_fit, self.act_zoom_in, self.act_zoom_out, self.act_actual):
            tb.addAction(a)
        tb.addSeparator()
        tb.addAction(self.act_expand_all)
        tb.addAction(self.act_reset_grouping)
        tb.addSeparator()
        tb.addAction(self.act_find)
        tb.addAction(self.act_export)
        self.act_expand_all.setIconText("Expand all")
        self.act_reset_grouping.setIconText("Group")
        self.act_zoom_in.setIconText("Zoom +")
        self.act_zoom_out.setIconText("Zoom −")
        self.act_actual.setIconText("1:1")
        self.act_find.setIconText("Find")
        self.act_export.setIconText("Export")
        self.addToolBar(tb)
        self.toolbar = tb

    # ------------------------------------------------------------------ file actions
    def export_dialog(self) -> None:
        doc = self.document
        if doc.view is None:
            QMessageBox.information(self, "Export graph", "There is no graph to export yet.")
            return
        stem = doc.graph_path.stem if doc.graph_path else "graph"
        ask_and_export(self, doc.view, doc.layout, str(Path.cwd() / f"{stem}.png"))

    def export_to(self, path: str | Path, scale: float = 2.0, dpi: int = 144) -> Path:
        """Export without dialogs (raises on failure)."""
        return export_graph(self.document.view, self.document.layout, path, scale, dpi)

    def copy_image(self) -> None:
        mod = scene_api.image_export()
        if mod is not None and hasattr(mod, "copy_to_clipboard"):
            mod.copy_to_clipboard(self.scene)
        else:
            QGuiApplication.clipboard().setPixmap(self.view.grab())
        self.statusBar().showMessage("graph image copied", 3000)

    def about(self) -> None:
        doc = self.document
        run = doc.run
        QMessageBox.about(
            self, "About gradviz",
            f"<h3>gradviz {gradviz.__version__}</h3><p>See and debug backpropagation in PyTorch.</p>"
            f"<p>Script: {doc.graph_path or '—'}<br>Device: {run.get('device') or '—'}<br>"
            f"Nodes: {count(run.get('nodes'))} · edges: {count(run.get('edges'))}</p>")

    def _update_title(self) -> None:
        name = self.document.path.name if self.document.path else None
        self.setWindowTitle(f"gradviz — {name}" if name else "gradviz")

    # ------------------------------------------------------------------ drag and drop
    @staticmethod
    def _dropped_script(mime) -> str | None:
        for url in mime.urls() if mime.hasUrls() else []:
            if url.isLocalFile() and url.toLocalFile().endswith(".py"):
                return url.toLocalFile()
        return None

    def dragEnterEvent(self, event) -> None:
        if self._dropped_script(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        path = self._dropped_script(event.mimeData())
        if path:
            event.acceptProposedAction()
            self.open_script(path)

    # ------------------------------------------------------------------ closing
    def shutdown(self, wait_ms: int = 30000) -> bool:
        """Stop the worker threads; False when a job is still running after ``wait_ms``."""
        ok = self.tracer.stop(wait_ms)
        return self.layouter.stop(wait_ms) and ok

    def closeEvent(self, event) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.shutdown()
        super().closeEvent(event)
