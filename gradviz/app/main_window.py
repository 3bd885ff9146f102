"""The gradviz main window: assembles the view, the panels and the menus, and offers
the extension contract of ``docs/ARCHITECTURE.md`` (``document``, ``graphChanged``,
``nodeSelected``, ``add_dock``, ``add_action``, ``select_nodes``, ``show_error``,
``set_node_norms``, ``set_loss``, ``mark_edges``, ``mark_nodes``, ``current_script``).

The work is done by parts, one job each; the window's methods are a thin facade:
``graph_sync`` (document ↔ scene: trace, re-group, show), ``interaction`` (selection,
highlight, clicks, keys, context menu, outline), ``overlays`` (legend, overview map,
theme), ``docks`` (panels), ``menus`` (menu bar, toolbar), ``file_actions`` (open,
drop, export, copy, about).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import QEvent, QPointF, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import QDockWidget, QMainWindow, QVBoxLayout, QWidget

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
from gradviz.app.script_watcher import ReloadBar, ScriptWatcher
from gradviz.app.search_bar import SearchBar
from gradviz.app.status_bar import StatusBar
from gradviz.app.theme import palette_theme
from gradviz.render.scene import GraphScene


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
        self._sized = False
        # worker threads must never run Python's cycle collector: it would destroy Qt objects there
        self.gc_guard = GuiThreadCollector(self)
        self.gc_guard.start()

        # the view and what floats over it
        self.theme = palette_theme(self.palette())
        self.scene = GraphScene(self, theme=self.theme)
        self.view = GraphView(self.scene)
        self.view.setContextMenuPolicy(Qt.CustomContextMenu)
        self.minimap = Minimap(self.view)
        self.overlays = Overlays(self)
        self.legend = self.overlays.legend
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
        for w in (self.reload_bar, self.search):
            lay.addWidget(w)
        lay.addWidget(self.view, 1)
        self.setCentralWidget(central)

        # panels
        self.docks = Docks(self)
        self._docks = self.docks.docks
        self.outline = OutlinePanel()
        self.inspector = InspectorPanel()
        self.errors = ErrorPanel()
        self.errors.dismissed.connect(lambda: self.error_dock.hide())
        self.outline_dock = self.add_dock("Modules", self.outline, Qt.LeftDockWidgetArea)
        self.inspector_dock = self.add_dock("Inspector", self.inspector, Qt.RightDockWidgetArea)
        self.error_dock = self.docks.error_dock = self.add_dock("Errors", self.errors, Qt.BottomDockWidgetArea)
        self.error_dock.hide()
        self.docks.side_widths = {self.outline_dock: 330, self.inspector_dock: 340}
        self.resizeDocks([self.outline_dock, self.inspector_dock], [300, 340], Qt.Horizontal)
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.watcher = ScriptWatcher(self)
        self.watcher.changed.connect(self.reload_bar.notify)

        # the parts that do the work
        self.files = FileActions(self)
        self.sync = GraphSync(self)
        self.tracer, self.layouter = self.sync.tracer, self.sync.layouter
        self.selection = Interaction(self)
        self.menus = Menus(self)
        self.menus.build()
        self.files.update_title()
        self.view.set_placeholder("Open a model script (File ▸ Open, Ctrl+O) or drop a .py file here.")

        self.extension_errors: list[tuple[str, str]] = []
        self.extensions: list[str] = []
        if extensions:
            self.extensions, self.extension_errors = load_extensions(self)
            for name, text in self.extension_errors:
                self.show_error(f"The extension {name} could not be installed.", details=text)

    # ------------------------------------------------------------------ extension contract
    def current_script(self) -> str | None:
        return str(self.document.path) if self.document.path else None

    def add_dock(self, title: str, widget: QWidget, area=Qt.RightDockWidgetArea) -> QDockWidget:
        return self.docks.add(title, widget, area)

    def add_action(self, menu: str, action: QAction) -> None:
        self.menus.menu(menu).addAction(action)
        if action.parent() is None:
            action.setParent(self)

    def select_nodes(self, ids: list[str], center: bool = True) -> None:
        self.selection.select(ids, center)

    def show_error(self, error, details: str = "", title: str | None = None) -> None:
        self.errors.show_error(error, details, title)
        self.docks.show_error_dock()

    def set_node_norms(self, norms: dict) -> None:
        self.sync.set_node_norms(norms)

    def set_loss(self, value: float) -> None:
        """The current loss (a training or recorded step): on the loss node and in the summary."""
        self.sync.set_loss(value)

    def mark_edges(self, edges: list[tuple[str, str]], style: str = "broken") -> None:
        self.sync.mark_edges(edges, style)

    def mark_nodes(self, ids: list[str], style: str = "nan-origin") -> None:
        self.sync.mark_nodes(ids, style)

    def set_color_range(self, lo: float | None, hi: float | None = None) -> None:
        """Fix the colour bar's range (e.g. during training); ``None`` follows the data."""
        self.document.fixed_range = (lo, hi) if lo is not None and hi is not None else None
        self.scene.set_color_range(lo, hi)

    def color_range(self) -> tuple[float, float]:
        scale = self.scene.color_scale()
        return scale.lo, scale.hi

    def node_color(self, nid: str):
        """The fill colour (QColor) node ``nid`` is drawn with, or None when not visible."""
        i = self.scene.index.get(nid)
        if i is None or i >= len(self.scene.fill_colors):
            return None
        return QColor(self.scene.fill_colors[i])

    def update_node_stats(self, nid: str, grad: dict | None, value: dict | None = None) -> None:
        """Fresh statistics of one node (e.g. the selected one, while training): the
        inspector shows them at once when that node is selected."""
        if self.document.update_node_stats(nid, grad, value) and self.selection.selected == nid:
            self.inspector.show_node(nid, self.document.node(nid), self.document.graph)

    def show_graph(self, graph, path) -> None:
        """Display a graph that was not traced here (e.g. read from a run file)."""
        self.sync.show_graph(graph, path)

    @property
    def selected(self) -> str:
        """The node id in focus on screen ('' = nothing selected)."""
        return self.selection.selected

    # ------------------------------------------------------------------ open, trace, group
    def open_script(self, path: str | Path) -> None:
        self.sync.open_script(path)

    def reload(self) -> None:
        self.sync.reload()

    def open_dialog(self) -> None:
        self.files.open_dialog()

    def is_busy(self) -> bool:
        return self.sync.is_busy()

    def _set_busy(self, phase: str | None) -> None:   # used by the runs extension
        self.sync.set_busy(phase)

    def set_expanded(self, expanded: set[str], then: Callable[[], None] | None = None) -> None:
        """Re-collapse and re-lay out (off the UI thread); ``then`` runs once it is shown."""
        self.sync.set_expanded(expanded, then)

    def expand(self, module: str, then=None) -> None:
        self.sync.expand(module, then)

    def collapse(self, module: str, then=None) -> None:
        self.sync.collapse(module, then)

    def expand_all(self) -> None:
        self.sync.set_expanded(self.document.all_modules())

    def collapse_all(self) -> None:
        self.sync.set_expanded(set())

    def reset_grouping(self) -> None:
        self.sync.reset_grouping()

    def reveal(self, nid: str) -> None:
        """Select ``nid`` (a full-graph id), expanding the groups that hide it."""
        self.sync.reveal(nid)

    def center_on(self, ids: list[str]) -> None:
        self.selection.center_on(ids)

    def node_at(self, scene_pt: QPointF) -> str | None:
        return self.selection.node_at(scene_pt)

    # ------------------------------------------------------------------ file actions
    def export_dialog(self) -> None:
        self.files.export_dialog()

    def export_to(self, path: str | Path, scale: float = 2.0, dpi: int = 144) -> Path:
        """Export without dialogs (raises on failure)."""
        return self.files.export_to(path, scale, dpi)

    def copy_image(self) -> None:
        self.files.copy_image()

    def about(self) -> None:
        self.files.about()

    def apply_default_dock_sizes(self) -> None:
        self.docks.apply_default_sizes()

    # ------------------------------------------------------------------ Qt events
    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.PaletteChange:
            self.overlays.follow_palette()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._sized:
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
        done = self.sync.shutdown(wait_ms)
        self.gc_guard.stop()
        return done

    def save_layout(self) -> None:
        """Window geometry and dock layout into the settings (done on close)."""
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())

    def restore_layout(self) -> bool:
        """Geometry and dock layout from the last session; False when there is none."""
        geometry = self.settings.value("window/geometry")
        if geometry is None:
            return False
        self.restoreGeometry(geometry)
        state = self.settings.value("window/state")
        if state is not None:
            self.restoreState(state)
        return True

    def closeEvent(self, event) -> None:
        self.save_layout()
        self.shutdown()
        super().closeEvent(event)
