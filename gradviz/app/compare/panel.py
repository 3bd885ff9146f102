"""The Compare panel: two steps of a run, or two runs (before and after a fix), side by side
or as one graph coloured by the ratio of gradient norms B/A, with the biggest changes listed.

Sides are typed as ``RUN``, ``RUN@STEP``, ``RUN@first`` or ``RUN@last``; with a run open, A
and B start as its first and last step. The work (reading, grouping, layout) is a job on
the "compare" lane bound to the current document, whose ``compare`` part holds the result.
"""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QAbstractItemView, QFileDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                               QPushButton, QSplitter, QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout,
                               QWidget)

from gradviz.app.compare.job import CompareResult, compare_job
from gradviz.app.compare.ratio_legend import RatioLegend, ratio_text
from gradviz.app.contract import PanelHost
from gradviz.app.dock_action import grow_dock
from gradviz.app.document import Document
from gradviz.app.graph_view import GraphView
from gradviz.app.jobs import Job
from gradviz.core.output.colors import LogColorScale
from gradviz.core.runtime.formatting import number
from gradviz.core.layout.grouping import group_of
from gradviz.core.record.compare_view import SCALE_CMAP, scale_range
from gradviz.render.export.legend import ColorBarWidget
from gradviz.render.scene.scene import GraphScene

PART = "compare"
IDLE_TEXT = "Compare two steps of a run (RUN@10, RUN@500) or two runs (before and after a fix)."
COLUMNS = ("name", "A", "B", "B/A", "change")


def _change_text(c) -> str:
    if c.change in ("vanished", "appeared", "nonfinite"):
        return c.change
    r = c.ratio
    return "—" if r is None else ratio_text(r) if r > 0 else "to 0"


class ComparePanel(QWidget):
    finished = Signal(object)     # CompareResult shown

    def __init__(self, host: PanelHost, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.doc: Document = host.document
        self.job: Job | None = None
        self.result: CompareResult | None = None
        self.side_a, self.side_b = QLineEdit(), QLineEdit()
        for edit, name in ((self.side_a, "A"), (self.side_b, "B")):
            edit.setPlaceholderText(f"{name}: run.gvrun@STEP")
        self.compare_button = QPushButton("Compare")
        self.status = QLabel(IDLE_TEXT)
        self.status.setWordWrap(True)
        self.tables = QTabWidget()
        self.params_table, self.nodes_table = self._table(), self._table()
        self.tables.addTab(self.params_table, "Parameters")
        self.tables.addTab(self.nodes_table, "Graph nodes")
        self.scenes = {k: GraphScene(self) for k in ("a", "b", "ratio")}
        self.views = {k: GraphView(s) for k, s in self.scenes.items()}
        self.legend = RatioLegend()
        self.drawings = QTabWidget()
        self.drawings.addTab(self._side_by_side(), "Side by side")
        self.drawings.addTab(self._ratio_tab(), "Ratio B/A")
        self._layout()
        self.compare_button.clicked.connect(lambda: self.run())
        for table in (self.params_table, self.nodes_table):
            table.cellClicked.connect(lambda row, _col, t=table: self._row_clicked(t, row))
        host.documentChanged.connect(self.show_document)
        self.show_document(host.document)

    # -- widgets ---------------------------------------------------------------------------
    def _table(self) -> QTableWidget:
        t = QTableWidget(0, len(COLUMNS))
        t.setHorizontalHeaderLabels(list(COLUMNS))
        t.setEditTriggers(QAbstractItemView.NoEditTriggers)
        t.setSelectionBehavior(QAbstractItemView.SelectRows)
        header = t.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        t.verticalHeader().setVisible(False)
        t.setMinimumWidth(420)
        return t

    def _side_by_side(self) -> QWidget:
        w = QWidget()
        outer = QVBoxLayout(w)
        outer.setContentsMargins(0, 0, 0, 0)
        lay = QHBoxLayout()
        self.titles = {}
        for key in ("a", "b"):
            col = QVBoxLayout()
            self.titles[key] = QLabel(key.upper())
            col.addWidget(self.titles[key])
            col.addWidget(self.views[key], 1)
            lay.addLayout(col, 1)
        outer.addLayout(lay, 1)
        self.norm_legend = ColorBarWidget()      # one gradient-norm range for both sides
        outer.addWidget(self.norm_legend)
        return w

    def _ratio_tab(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        lay.setContentsMargins(0, 0, 0, 0)
        self.titles["ratio"] = QLabel("B / A")
        lay.addWidget(self.titles["ratio"])
        lay.addWidget(self.views["ratio"], 1)
        lay.addWidget(self.legend)
        return w

    def _layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("A"))
        top.addWidget(self.side_a, 1)
        browse_a = QPushButton("…")
        browse_a.clicked.connect(lambda: self._browse(self.side_a))
        top.addWidget(browse_a)
        top.addWidget(QLabel("B"))
        top.addWidget(self.side_b, 1)
        browse_b = QPushButton("…")
        browse_b.clicked.connect(lambda: self._browse(self.side_b))
        top.addWidget(browse_b)
        top.addWidget(self.compare_button)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.tables)
        split.addWidget(self.drawings)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 4)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addLayout(top)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)

    def _browse(self, edit: QLineEdit) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Run file", "", "gradviz runs (*.gvrun);;All files (*)")
        if path:
            edit.setText(path)

    # -- documents -----------------------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        if self.job is not None and self.job.active:
            self.job.cancel()
        self.doc, self.job = doc, None
        self.compare_button.setEnabled(True)
        if doc.kind == "run" and doc.path is not None:
            self.side_a.setText(f"{doc.path}@first")
            self.side_b.setText(f"{doc.path}@last")
        self.show_result(doc.parts.get(PART))

    # -- running ----------------------------------------------------------------------------
    def run(self) -> Job | None:
        a, b = self.side_a.text().strip(), self.side_b.text().strip()
        if not a or not b:
            self.status.setText("Give both sides: a run file, optionally @STEP (e.g. before.gvrun, run.gvrun@10).")
            return None
        doc = self.host.document
        self.doc = doc
        self.status.setText("Comparing…")
        self.compare_button.setEnabled(False)
        self.job = self.host.jobs.submit(PART, compare_job(a, b), document=doc,
                                         on_done=lambda r: self._done(doc, r), on_failed=self._failed,
                                         on_phase=lambda s: self.status.setText(f"Comparing: {s}…"),
                                         on_ended=lambda _o: self.compare_button.setEnabled(True))
        return self.job

    def _failed(self, exc: BaseException, _details: str) -> None:
        self.status.setText(f"Cannot compare: {exc}")

    def _done(self, doc: Document, result: CompareResult) -> None:
        doc.set_part(PART, result)
        self.show_result(result)
        if result.views is not None:
            grow_dock(self, self.window().height(), share=0.6)     # two graphs side by side want room
        self.finished.emit(result)

    # -- showing ------------------------------------------------------------------------------
    def show_result(self, result: CompareResult | None) -> None:
        self.result = result
        if result is None:
            for t in (self.params_table, self.nodes_table):
                t.setRowCount(0)
            for s in self.scenes.values():
                s.set_graph(_empty(), _empty_layout())
            self.status.setText(IDLE_TEXT)
            return
        c = result.comparison
        self._fill(self.params_table, c.params)
        self._fill(self.nodes_table, c.nodes)
        self.status.setText(summary(c))
        self._draw(result)

    def _fill(self, table: QTableWidget, changes) -> None:
        table.setRowCount(len(changes))
        for r, ch in enumerate(changes):
            where = f"{ch.label} ({ch.module})" if ch.module and ch.label != ch.name.partition(":")[2] else ch.label
            for col, text in enumerate((where or ch.name, number(ch.a, none="—"), number(ch.b, none="—"),
                                        _change_text(ch), ch.change)):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, ch.name)
                table.setItem(r, col, item)

    def _draw(self, result: CompareResult) -> None:
        views, lay = result.views, result.layouts
        if views is None:
            for s in self.scenes.values():
                s.set_graph(_empty(), _empty_layout())
            return
        lo, hi = views.norm_range
        for key, graph in (("a", views.view_a), ("b", views.view_b)):
            scene = self.scenes[key]
            if graph is None:
                scene.set_graph(_empty(), _empty_layout())
                continue
            scene.set_color_range(lo, hi)            # one range: the same colour means the same norm
            scene.set_graph(graph, lay[key])
            self.views[key].fit()
        self.norm_legend.set_scale(self.scenes["b"].color_scale())
        c = result.comparison
        self.titles["a"].setText(f"A: {c.a.path} · step {c.a.node_step} (node norms)")
        self.titles["b"].setText(f"B: {c.b.path} · step {c.b.node_step} (node norms)")
        self.titles["ratio"].setText(f"B / A of each box's gradient norm: step {c.b.node_step} of B over step "
                                     f"{c.a.node_step} of A (node norms)")
        ratio = self.scenes["ratio"]
        ratio.set_graph(views.ratio, lay["ratio"])
        ratio.set_color_scale(LogColorScale(*scale_range(views.limit), cmap=SCALE_CMAP))
        self.views["ratio"].fit()
        self.legend.set_limit(views.limit)

    def _row_clicked(self, table: QTableWidget, row: int) -> None:
        item = table.item(row, 0)
        if item is None or self.result is None or self.result.views is None:
            return
        self.select(item.data(Qt.UserRole))

    def select(self, name: str) -> str | None:
        """Select a parameter or node (full-graph id of B) in the three drawings; returns the box shown."""
        views = self.result.views
        nid = name if ":" in name else f"param:{name}"
        graph = self.result.comparison.b.graph
        shown = nid if nid in views.view_b else None
        if shown is None and graph is not None and nid in graph:
            box = group_of(graph.nodes[nid].get("module", ""), views.expanded)
            shown = f"group:{box}" if box and f"group:{box}" in views.view_b else None
        for key, scene in self.scenes.items():
            scene.clearSelection()
            item = scene.node_item(shown) if shown else None
            if item is not None:
                item.setSelected(True)
                self.views[key].ensureVisible(item, 60, 60)
        return shown


def summary(c) -> str:
    how = {"id": "nodes matched by id (one graph structure)",
           "structure": "nodes matched by module, op and order (the graphs differ)",
           "none": "no node norms on a side: parameters only"}[c.matched_by]
    moved = sum(1 for ch in c.params if ch.change in ("vanished", "appeared", "nonfinite"))
    text = (f"A: step {c.a.step} (loss {number(c.a.loss)}), B: step {c.b.step} (loss {number(c.b.loss)}); "
            f"{len(c.params)} parameters ({moved} appeared, vanished or non-finite), {len(c.nodes)} nodes; {how}.")
    if c.matched_by != "none" and (c.a.node_step, c.b.node_step) != (c.a.step, c.b.step):
        # node norms are recorded every N steps: say which ones the drawings and the node table show
        text += (f" Graph nodes and drawings: the node norms sampled at steps {c.a.node_step} (A) and "
                 f"{c.b.node_step} (B), the nearest at or before.")
    return text


def _empty():
    import networkx as nx

    return nx.DiGraph()


def _empty_layout():
    from gradviz.core.layout.types import Layout

    return Layout(pos={}, size={}, edges={}, layer={}, width=0.0, height=0.0)
