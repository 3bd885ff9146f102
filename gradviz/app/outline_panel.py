"""The module tree: module, type, #params, gradient norm (with its colour).

A module without parameters (ReLU, Sigmoid, ...) has no parameter gradient norm; it
shows the largest gradient norm flowing through its ops instead, in italics.

The check box of a module says whether it is expanded in the graph; toggling it
asks the window to expand or collapse it. Clicking a row selects and centres it.
"""
from __future__ import annotations

from PySide6.QtCore import QSortFilterProxyModel, Qt, Signal
import math

from PySide6.QtGui import QColor, QFont, QPixmap, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLineEdit, QTreeView, QVBoxLayout, QWidget

from gradviz.app.formatting import count, num
from gradviz.core.modules import prefixes

PATH_ROLE = Qt.UserRole + 1
COLUMNS = ["module", "type", "params", "grad norm"]
THROUGH_TIP = "largest gradient through its ops (the module has no parameters)"


def largest_op_norms(graph) -> dict[str, float]:
    """Module path -> the largest ``grad_norm`` of the op nodes in it or its sub-modules
    (NaN when one is NaN, else Inf when one is infinite). Modules with no op gradient are absent."""
    out: dict[str, float] = {}
    if graph is None:
        return out
    for _, attrs in graph.nodes(data=True):
        value = attrs.get("grad_norm")
        if attrs.get("kind") != "op" or value is None:
            continue
        for path in prefixes(attrs.get("module") or ""):
            old = out.get(path)
            if old is None or math.isnan(value) or (not math.isnan(old) and value > old):
                out[path] = value
    return out


class OutlinePanel(QWidget):
    expandToggled = Signal(str, bool)   # module path, expanded
    moduleActivated = Signal(str)       # module path ('' = the model)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("outline")
        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(COLUMNS)
        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setRecursiveFilteringEnabled(True)
        self.proxy.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.proxy.setFilterKeyColumn(0)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter modules")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter)
        self.tree = QTreeView()
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)
        self.tree.setIndentation(12)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.tree.setEditTriggers(QAbstractItemView.NoEditTriggers)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        header.setMinimumSectionSize(40)
        header.setSectionResizeMode(1, QHeaderView.Interactive)
        header.resizeSection(1, 84)
        for c in range(2, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeToContents)
        self.tree.clicked.connect(self._clicked)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.setSpacing(4)
        lay.addWidget(self.filter)
        lay.addWidget(self.tree)
        self._items: dict[str, QStandardItem] = {}
        self._updating = False
        self.model.itemChanged.connect(self._changed)

    def set_modules(self, modules: dict[str, dict], expanded: set[str], scale=None, graph=None) -> None:
        """Rebuild from ``graph.graph['modules']``; ``scale`` (a ``LogColorScale``) paints the swatches;
        ``graph`` (the full traced graph) gives modules without parameters their largest op gradient."""
        self._updating = True
        self.tree.setUpdatesEnabled(False)
        through = largest_op_norms(graph)
        norms: dict[str, float | None] = {}
        derived: set[str] = set()
        for path, info in modules.items():
            norms[path] = info.get("grad_norm")
            if norms[path] is None and not info.get("numel") and path in through:
                norms[path] = through[path]
                derived.add(path)
        colors = {}
        if scale is not None:
            paths = list(modules)
            rgb = scale.colors_for([norms[p] for p in paths])
            colors = {p: tuple(int(c) for c in rgb[i]) for i, p in enumerate(paths)}
        self.model.removeRows(0, self.model.rowCount())
        self._items = {}
        children: dict[str | None, list[str]] = {}
        for path, info in modules.items():
            children.setdefault(info.get("parent"), []).append(path)
        swatches: dict[tuple, QPixmap] = {}
        italic = QFont(self.tree.font())
        italic.setItalic(True)

        def swatch(rgb) -> QPixmap:
            if rgb not in swatches:
                pm = QPixmap(12, 12)
                pm.fill(QColor(*rgb))
                swatches[rgb] = pm
            return swatches[rgb]

        def add(parent_item, path: str) -> None:
            info = modules[path]
            name = path.rpartition(".")[2] if path else "(model)"
            first = QStandardItem(name)
            first.setData(path, PATH_ROLE)
            first.setToolTip(path or "the whole model")
            if path and info.get("nodes"):
                first.setCheckable(True)
                first.setCheckState(Qt.Checked if path in expanded else Qt.Unchecked)
                first.setToolTip((path or "") + "\nchecked: expanded in the graph")
            norm_item = QStandardItem(num(norms[path]))
            if path in derived:
                norm_item.setFont(italic)
                norm_item.setToolTip(THROUGH_TIP)
            if path in colors:
                norm_item.setData(swatch(colors[path]), Qt.DecorationRole)
            norm_item.setData(Qt.AlignRight | Qt.AlignVCenter, Qt.TextAlignmentRole)
            params = QStandardItem(count(info.get("numel")) if info.get("numel") else "")
            params.setData(Qt.AlignRight | Qt.AlignVCenter, Qt.TextAlignmentRole)
            row = [first, QStandardItem(info.get("type", "")), params, norm_item]
            for it in row[1:]:
                it.setData(path, PATH_ROLE)
            parent_item.appendRow(row)
            self._items[path] = first
            for child in children.get(path, []):
                add(first, child)

        for root in children.get(None, []):
            add(self.model.invisibleRootItem(), root)
        self._updating = False
        self.tree.expandToDepth(1)
        self.tree.setUpdatesEnabled(True)

    def set_expanded(self, expanded: set[str]) -> None:
        self._updating = True
        for path, item in self._items.items():
            if item.isCheckable():
                item.setCheckState(Qt.Checked if path in expanded else Qt.Unchecked)
        self._updating = False

    def select_module(self, path: str) -> None:
        item = self._items.get(path)
        if item is None:
            return
        index = self.proxy.mapFromSource(item.index())
        self.tree.setCurrentIndex(index)
        self.tree.scrollTo(index)

    def item(self, path: str) -> QStandardItem | None:
        return self._items.get(path)

    def _changed(self, item: QStandardItem) -> None:
        if self._updating or not item.isCheckable():
            return
        self.expandToggled.emit(item.data(PATH_ROLE), item.checkState() == Qt.Checked)

    def _clicked(self, index) -> None:
        path = self.proxy.mapToSource(index).data(PATH_ROLE)
        if path is not None:
            self.moduleActivated.emit(path)

    def _filter(self, text: str) -> None:
        self.proxy.setFilterFixedString(text)
        if text:
            self.tree.expandAll()
