"""Find nodes: op label, op name, parameter name or module path (case-insensitive).

Enter / F3 go to the next hit, Shift+Enter / Shift+F3 to the previous one; Escape
closes the bar. The window reveals each hit (expanding its groups) and centres it.
"""
from __future__ import annotations

import networkx as nx
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QToolButton, QWidget

FIELDS = ("label", "op", "param", "module")


def find_nodes(graph: nx.DiGraph | None, text: str, order: dict[str, int] | None = None) -> list[str]:
    """Ids of nodes whose label, op, parameter name or module path contains ``text``."""
    text = text.strip().lower()
    if graph is None or not text:
        return []
    hits = []
    for nid, attrs in graph.nodes(data=True):
        if any(text in str(attrs.get(f) or "").lower() for f in FIELDS):
            hits.append(nid)
    if order:
        hits.sort(key=lambda n: order.get(n, 0))
    return hits


class SearchBar(QWidget):
    hitChosen = Signal(str)
    closed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("searchBar")
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Find op, parameter or module…")
        self.edit.setClearButtonEnabled(True)
        self.edit.setMinimumWidth(260)
        self.count = QLabel("")
        self.count.setMinimumWidth(70)
        prev = QToolButton(text="▲", toolTip="Previous (Shift+Enter, Shift+F3)", autoRaise=True)
        nxt = QToolButton(text="▼", toolTip="Next (Enter, F3)", autoRaise=True)
        close = QToolButton(text="✕", toolTip="Close (Esc)", autoRaise=True)
        prev.clicked.connect(self.previous)
        nxt.clicked.connect(self.next)
        close.clicked.connect(self.close_bar)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 3, 6, 3)
        lay.addWidget(QLabel("Find"))
        lay.addWidget(self.edit)
        lay.addWidget(self.count)
        lay.addWidget(prev)
        lay.addWidget(nxt)
        lay.addStretch(1)
        lay.addWidget(close)
        self._source = lambda: (None, None)
        self.hits: list[str] = []
        self.index = -1
        self._debounce = QTimer(self, singleShot=True, interval=150, timeout=self._run)
        self.edit.textChanged.connect(lambda _: self._debounce.start())
        self.edit.returnPressed.connect(self._enter)
        # F3 / Shift+F3 are the window's Edit menu shortcuts (they work with the bar closed too)
        for key, slot in (("Escape", self.close_bar), ("Shift+Return", self.previous),
                          ("Shift+Enter", self.previous)):
            sc = QShortcut(QKeySequence(key), self)
            sc.setContext(Qt.WidgetWithChildrenShortcut)
            sc.activated.connect(slot)
        self.hide()

    def set_source(self, source) -> None:
        """``source() -> (full graph, order dict)``: where to search."""
        self._source = source

    def open_bar(self) -> None:
        self.show()
        self.edit.setFocus()
        self.edit.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self.closed.emit()

    def search(self, text: str) -> list[str]:
        """Set the query and run it now (goes to the first hit)."""
        self.edit.blockSignals(True)
        self.edit.setText(text)
        self.edit.blockSignals(False)
        self._debounce.stop()
        self._run()
        return self.hits

    def refresh(self) -> None:
        """Re-run the query on a new graph, without moving."""
        if self.isVisible() and self.edit.text():
            graph, order = self._source()
            self.hits = find_nodes(graph, self.edit.text(), order)
            self.index = min(self.index, len(self.hits) - 1)
            self._show_count()

    def _run(self) -> None:
        graph, order = self._source()
        self.hits = find_nodes(graph, self.edit.text(), order)
        self.index = -1
        if self.hits:
            self.next()
        else:
            self._show_count()

    def _enter(self) -> None:
        if self._debounce.isActive():
            self._debounce.stop()
            self._run()
        else:
            self.next()

    def next(self) -> None:
        self._step(+1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, d: int) -> None:
        if self._debounce.isActive():
            self._debounce.stop()
            self._run()
            return
        if not self.hits:
            self._show_count()
            return
        self.index = (self.index + d) % len(self.hits)
        self._show_count()
        self.hitChosen.emit(self.hits[self.index])

    def _show_count(self) -> None:
        if not self.edit.text().strip():
            self.count.setText("")
        elif not self.hits:
            self.count.setText("no match")
        else:
            self.count.setText(f"{self.index + 1} of {len(self.hits)}")

    def current(self) -> str | None:
        return self.hits[self.index] if 0 <= self.index < len(self.hits) else None
