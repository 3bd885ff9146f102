"""The gradviz main window: creates every part it has, in order, and offers the panels the
interfaces of ``contract.py`` (``PanelHost``, ``TrainingHost``, ``RunsHost``).

What the window shows belongs to one ``Document`` held by the ``Session``: opening,
reloading or failing to open replaces it as a whole. The parts, one job each:
``session`` (which document, trace/layout jobs), ``graph_sync`` (the document on screen),
``interaction`` (selection, clicks, keys, context menu, outline), ``overlays`` (legend,
overview map, theme), ``docks``, ``actions`` + ``menus`` (menu bar, toolbar, shortcuts),
``file_actions`` (open, drop, export, copy, about). The window's own methods are a thin
facade over them.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QEvent, QPointF, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import QDockWidget, QMainWindow, QVBoxLayout, QWidget

from gradviz.app.actions import WindowActions
from gradviz.app.contract import Opener
from gradviz.app.docks import Docks
from gradviz.app.document import Document
from gradviz.app.error_panel import ErrorPanel
from gradviz.app.extensions import load_extensions
from gradviz.app.file_actions import FileActions
from gradviz.app.gc_guard import GuiThreadCollector
from gradviz.app.graph_sync import GraphSync
from gradviz.app.graph_view import GraphView
from gradviz.app.icon import app_icon
from gradviz.app.inspector_panel import InspectorPanel
from gradviz.app.interaction import Interaction
from gradviz.app.menus import Menus
from gradviz.app.minimap import Minimap
from gradviz.app.outline_panel import OutlinePanel
from gradviz.app.overlays import Overlays
from gradviz.app.recent_files import RecentFiles
from gradviz.app.script_watcher import ReloadBar, ScriptWatcher
from gradviz.app.search_bar import SearchBar
from gradviz.app.session import Session
from gradviz.app.settings import MIN_GRAPH_FRACTION, usable_geometry, window_settings
from gradviz.app.status_bar import StatusBar
from gradviz.app.theme import palette_theme
from gradviz.render.scene.scene import GraphScene

log = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    documentChanged = Signal(object)  # the new current Document (panels drop what they showed)
    documentEdited = Signal(object, str, dict)  # the current Document changed: what, details
    graphChanged = Signal(object)     # the current document's full graph (nx.DiGraph) is known
    graphShown = Signal()             # a (new or re-grouped) view of it is on screen
    nodeSelected = Signal(str)        # view node id in focus, '' when nothing is selected
    traceFailed = Signal(object)      # the exception of a failed load/trace
    busyChanged = Signal(bool)
    aboutToClose = Signal()           # closing: panels stop their threads

    def __init__(self, settings: QSettings | None = None, extensions: bool = True) -> None:
        # long on purpose: every part of the window is created here, in order, so the contract
        # (what exists, and what each part is given) reads in one place
        super().__init__()
        self.setWindowIcon(app_icon())
        self.setWindowTitle("gradviz")
        self.setDockOptions(QMainWindow.AnimatedDocks | QMainWindow.AllowTabbedDocks)
        self.setAcceptDrops(True)
        self.settings = settings if settings is not None else window_settings()
        self.session = Session(self)
        self.jobs = self.session.jobs
        # worker threads must never run Python's cycle collector: it would destroy Qt objects there
        self.gc_guard = GuiThreadCollector(self)
        self.gc_guard.start()
        self._openers: dict[str, Opener] = {".py": self._open_script_file}
        self._sized = False

        # the graph and what floats over it
        self.scene = GraphScene(self, theme=palette_theme(self.palette()))
        self.view = GraphView(self.scene)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.minimap = Minimap(self.view)
        self.overlays = Overlays(self.view, self.scene, self.minimap, palette_theme(self.palette()))
        self.legend = self.overlays.legend
        self.search = SearchBar()
        self.search.set_source(lambda: (self.document.graph, self.document.order()))
        self.reload_bar = ReloadBar()
        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        for w in (self.reload_bar, self.search):
            lay.addWidget(w)
        lay.addWidget(self.view, 1)
        self.setCentralWidget(central)

        # panels, menus, status bar
        self.docks = Docks(self)
        self.outline = OutlinePanel()
        self.inspector = InspectorPanel()
        self.errors = ErrorPanel()
        self.outline_dock = self.add_dock("Modules", self.outline, Qt.LeftDockWidgetArea)
        self.inspector_dock = self.add_dock("Inspector", self.inspector, Qt.RightDockWidgetArea)
        self.error_dock = self.docks.add_error_dock(self.errors)
        self.docks.side_widths = {self.outline_dock: 340, self.inspector_dock: 340}
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.acts = WindowActions(self)
        self.menus = Menus(self, self.acts)
        self.docks.panels_menu = self.menus.panels_menu
        for dock in self.docks.docks:
            self.menus.panels_menu.addAction(dock.toggleViewAction())
        self.toolbar = self.menus.toolbar
        self.recent = RecentFiles(self.menus.recent_menu, self.settings, self)
        self.watcher = ScriptWatcher(self)

        # the parts that do the work
        self.sync = GraphSync(self, self.session)
        self.selection = Interaction(self, self.session, self)
        self.files = FileActions(self, self.session, self.view, self.open_script, lambda: tuple(self._openers))
        self._connect()
        self.view.set_placeholder("Open a model script (File ▸ Open, Ctrl+O) or drop a .py file here.")

        # extension panels: their parts are declared here, filled by install()
        self.training_panel: Any = None
        self.diagnosis_panels: dict[str, Any] = {}
        self.run_panel: Any = None
        self.extension_errors: list[tuple[str, str]] = []
        self.extensions: list[str] = []
        self.extension_parts: dict[str, Any] = {}   # what each install returned (kept alive with the window)
        if extensions:
            parts, self.extension_errors = load_extensions(self)
            self.extensions = list(parts)
            self.extension_parts = parts
            self.training_panel = parts.get("training")
            self.diagnosis_panels = parts.get("diagnosis") or {}
            self.run_panel = parts.get("runs")
            for name, text in self.extension_errors:
                self.show_error(f"The extension {name} could not be installed.", details=text)

    def _connect(self) -> None:
        acts, s = self.acts, self.session
        s.documentChanged.connect(self.documentChanged)
        s.documentEdited.connect(self.documentEdited)
        s.documentEdited.connect(self._remember_opened)
        s.busyChanged.connect(self.busyChanged)
        self.search.hitChosen.connect(self.reveal)
        self.search.closed.connect(self.view.setFocus)
        self.reload_bar.reload.connect(self.reload)
        self.watcher.changed.connect(self.reload_bar.notify)
        self.errors.dismissed.connect(self.hide_errors)
        self.recent.chosen.connect(self.open_script)
        for act, slot in ((acts.open, self.files.open_dialog), (acts.reload, self.reload),
                          (acts.export, self.files.export_dialog), (acts.copy, self.files.copy_image),
                          (acts.quit, self.close), (acts.find, self.search.open_bar),
                          (acts.find_next, self.search.next), (acts.find_previous, self.search.previous),
                          (acts.clear_selection, lambda: self.select_nodes([])), (acts.fit, self.view.fit),
                          (acts.actual, self.view.actual_size), (acts.zoom_in, self.view.zoom_in),
                          (acts.zoom_out, self.view.zoom_out), (acts.expand_all, self.expand_all),
                          (acts.collapse_all, self.collapse_all), (acts.reset_grouping, self.reset_grouping),
                          (acts.about, self.files.about)):
            act.triggered.connect(lambda _=False, slot=slot: slot())
        acts.minimap.toggled.connect(self.overlays.set_minimap_visible)
        # the legend and the map step aside from (or fade over) what is selected
        self.overlays.protected = lambda: [self.selection.nodes_rect([n]) for n in self.selection.shown_ids[:50]]
        self.nodeSelected.connect(lambda _nid: self.overlays.place())
        acts.legend.toggled.connect(self.overlays.set_legend_visible)

    # ------------------------------------------------------------------ PanelHost
    @property
    def document(self) -> Document:
        return self.session.document

    def add_dock(self, title: str, widget: QWidget, area=Qt.RightDockWidgetArea, tabbed: bool = True) -> QDockWidget:
        return self.docks.add(title, widget, area, tabbed)

    def add_action(self, menu: str, action: QAction, toolbar: bool = False) -> None:
        if action.parent() is None:
            action.setParent(self)
        self.menus.add(menu, action)
        if toolbar:
            self.toolbar.addAction(action)

    def show_error(self, error, details: str = "", title: str | None = None) -> None:
        self.errors.show_error(error, details, title)
        self.docks.show_error_dock()

    def hide_errors(self) -> None:
        self.error_dock.hide()

    def show_message(self, text: str, ms: int = 5000) -> None:
        self.statusBar().showMessage(text, ms)

    # ------------------------------------------------------------------ TrainingHost, RunsHost
    def node_color(self, nid: str) -> QColor | None:
        """The fill colour ``nid`` is drawn with, or None when not visible."""
        i = self.scene.index.get(nid)
        if i is None or i >= len(self.scene.fill_colors):
            return None
        return QColor(self.scene.fill_colors[i])

    def color_range(self) -> tuple[float, float]:
        scale = self.scene.color_scale()
        return scale.lo, scale.hi

    def set_color_range(self, lo: float | None, hi: float | None = None) -> None:
        """Fix the colour bar's range (e.g. during training); ``None`` follows the data."""
        self.document.set_fixed_range((lo, hi) if lo is not None and hi is not None else None)

    def add_opener(self, suffixes: tuple[str, ...], opener: Opener) -> None:
        for suffix in suffixes:
            self._openers[suffix.lower()] = opener

    def begin_document(self, path: str | Path, kind: str) -> Document:
        """A new, still empty document (a run file being opened): the old one is gone."""
        self.reload_bar.hide()
        self.watcher.watch(None)
        return self.session.replace(Document(Path(path).expanduser().resolve(), kind))

    def show_graph(self, graph, document: Document) -> None:
        """Show a graph that was not traced here (e.g. from a run file) in ``document``."""
        self.session.show_graph(graph, document, self.view.fit_size())

    # ------------------------------------------------------------------ the current document
    def current_script(self) -> str | None:
        doc = self.document
        return str(doc.path) if doc.path is not None and doc.kind == "script" else None

    @property
    def selected(self) -> str:
        return self.document.selected

    def select_nodes(self, ids: list[str], center: bool = True) -> None:
        self.document.select(ids, center)

    def set_node_norms(self, norms: dict) -> None:
        self.document.set_norms(norms)

    def set_loss(self, value: float) -> None:
        self.document.set_loss(value)

    def mark_edges(self, edges: list[tuple[str, str]], style: str = "broken") -> None:
        self.document.mark_edges(edges, style)

    def mark_nodes(self, ids: list[str], style: str = "nan-origin") -> None:
        self.document.mark_nodes(ids, style)

    def update_node_stats(self, nid: str, grad: dict | None, value: dict | None = None) -> None:
        self.document.update_node_stats(nid, grad, value)

    # ------------------------------------------------------------------ open, trace, group
    def open_script(self, path: str | Path) -> None:
        """Open a script, or any file an extension opens (``add_opener``: run files)."""
        path = Path(path).expanduser().resolve()
        self._openers.get(path.suffix.lower(), self._open_script_file)(path)

    def _open_script_file(self, path: Path) -> None:
        self.reload_bar.hide()
        self.watcher.watch(path)
        self.session.open_script(path, self.view.fit_size())

    def _remember_opened(self, doc, what: str, info: dict) -> None:
        """Recent files: a script once it opened (its first view), never one that failed."""
        if what == "view" and info.get("fit") and doc.status == "ready" and doc.kind == "script" \
                and doc.path is not None and doc.path.is_file():
            self.recent.add(doc.path)

    def reload(self) -> None:
        if self.document.path is not None:
            self.open_script(self.document.path)

    def open_dialog(self) -> None:
        self.files.open_dialog()

    def is_busy(self) -> bool:
        return self.session.is_busy()

    def set_expanded(self, expanded: set[str], then: Callable[[], None] | None = None) -> None:
        """Re-collapse and re-lay out (off the UI thread); once it is shown the user's place is
        kept (the selection, and what was in the middle of the view stays there), then ``then`` runs."""
        anchor, selected = self.selection.anchor(), self.document.selected

        def shown() -> None:
            self.selection.restore(anchor, selected)
            if then is not None:
                then()
        self.session.set_expanded(expanded, shown)

    def expand(self, module: str, then=None) -> None:
        self.set_expanded(self.document.expanded_with(module), then or (lambda: self.focus_module(module)))

    def collapse(self, module: str, then=None) -> None:
        """Fold ``module`` (and the modules inside it) back into one box, and select that box."""
        gid = f"group:{module}"
        self.set_expanded(self.document.expanded_without(module),
                          then or (lambda: self.select_nodes([gid], center=False)))

    def expand_all(self) -> None:
        self.set_expanded(self.document.all_modules())

    def collapse_all(self) -> None:
        self.set_expanded(set())

    def reset_grouping(self) -> None:
        """The grouping the graph opened with (``first_view``), fitted."""
        self.session.default_grouping(self.view.fit_size(), then=self.view.fit)

    def reveal(self, nid: str) -> None:
        """Select ``nid`` (a full-graph id), expanding the groups that hide it."""
        doc = self.document
        if doc.view is None:
            return
        if nid not in doc.view:
            needed = doc.expanded_to_show(nid)
            if needed != doc.expanded:
                self.set_expanded(needed, lambda: self.select_nodes([nid]))
                return
        self.select_nodes([nid])

    def focus_module(self, module: str) -> None:
        members = [n for n, a in self.document.view.nodes(data=True)
                   if a.get("module", "") == module or a.get("module", "").startswith(module + ".")]
        if members:
            self.selection.center_on(members)

    def center_on(self, ids: list[str]) -> None:
        self.selection.center_on(ids)

    def node_at(self, scene_pt: QPointF) -> str | None:
        return self.selection.node_at(scene_pt)

    # ------------------------------------------------------------------ file actions
    def export_dialog(self) -> None:
        self.files.export_dialog()

    def export_to(self, path: str | Path, scale: float = 2.0, dpi: int = 144, what: str = "whole graph") -> Path:
        """Export the scene as shown, without dialogs (raises on failure)."""
        return self.files.export_to(path, scale, dpi, what)

    def copy_image(self) -> None:
        self.files.copy_image()

    # ------------------------------------------------------------------ Qt events, settings
    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.PaletteChange:
            self.overlays.follow_palette(self.palette(), self.inspector.histogram.apply_palette)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._sized or self.view.width() < MIN_GRAPH_FRACTION * self.width():
            self._sized = True
            self.docks.apply_default_sizes()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.overlays.place()

    def dragEnterEvent(self, event) -> None:
        self.files.drag_enter(event)

    def dropEvent(self, event) -> None:
        self.files.drop(event)

    def shutdown(self, wait_ms: int = 30000) -> bool:
        """Stop the worker threads; False when a job is still running after ``wait_ms``."""
        done = self.session.stop(wait_ms)
        self.gc_guard.stop()
        return done

    def save_layout(self) -> None:
        """Window geometry and dock layout into the settings (done on close)."""
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())

    def restore_layout(self) -> bool:
        """Geometry and dock layout from the last session; False (nothing restored) when there
        is none, or when it is not usable: tiny, off every screen, or leaving the graph a sliver."""
        geometry = self.settings.value("window/geometry")
        if geometry is None or not self.restoreGeometry(geometry):
            return False
        if not usable_geometry(self.frameGeometry()):
            log.info("saved window geometry %s is not usable; using the default size", self.frameGeometry())
            return False
        state = self.settings.value("window/state")
        if state is not None and self.restoreState(state):
            self._sized = True      # the user's dock sizes: kept, unless they leave the graph a sliver
        return True

    def closeEvent(self, event) -> None:
        self.save_layout()
        self.aboutToClose.emit()
        self.shutdown()
        super().closeEvent(event)
