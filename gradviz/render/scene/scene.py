"""``GraphScene``: the one renderer of a laid-out graph, used by the window and by image export.

Per node the scene keeps parallel lists (rect, kind, colours, text) indexed by the
node's position; ``NodeItem`` (hit-testing, selection) and the batch items that paint
read them. Recolouring (``set_norms``) therefore touches lists and repaints batches; it
never rebuilds items, so it is cheap enough to run on every training step.

The parts it builds (``render.parts``) and its overlays read it through the Protocols of
``parts/scene_reads.py``, never this class: the scene imports its parts, no part imports the scene.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Hashable, Iterable, Iterator, Mapping

import networkx as nx
import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPen
from PySide6.QtWidgets import QGraphicsScene, QGraphicsSceneMouseEvent, QToolTip

from gradviz.core.output import structure_colors
from gradviz.core.output.colors import LogColorScale, auto_range
from gradviz.core.runtime.formatting import number
from gradviz.core.layout.box_facts import box_facts
from gradviz.core.layout.types import Layout
from gradviz.core.output.marks import Marks
from gradviz.render.parts.edges import build_edges
from gradviz.render.parts.frame_labels import curve_segments
from gradviz.render.parts.frames import Frame, FrameItem, build_frames, place_labels
from gradviz.render.primitives.frame_room import entries
from gradviz.render.parts.items import NodeBatch, NodeItem, build_node_batches
from gradviz.render.parts.node_colors import NodeColors
from gradviz.render.parts.node_paint import NodePainter, elided_lines
from gradviz.render.primitives import style
from gradviz.render.primitives.tiles import BoxIndex
from gradviz.render.scene.graph_marks import decorate, failed_indices, graph_marks
from gradviz.render.scene.header import ShownState, ShownValues
from gradviz.render.scene.marks_layer import MarkLayer
from gradviz.render.scene.overview import Overview, add_overview

MARGIN = 24.0


class GraphScene(QGraphicsScene):
    """The drawing of one laid-out graph: nodes, edges, module frames and marks.

    What it shows besides the graph (live norms and loss with their step, colour range,
    marks) is kept here too, so an export of the scene states exactly what is on screen
    (``shown_state``)."""

    nodeClicked = Signal(str)
    nodeDoubleClicked = Signal(str)
    backgroundClicked = Signal()
    colorScaleChanged = Signal(object)  # the new LogColorScale
    marksChanged = Signal(list)         # the mark styles drawn now (the legend explains each)

    def __init__(self, parent=None, theme: str | style.Theme = "light") -> None:
        super().__init__(parent)
        self.theme = style.theme(theme)
        self.force_detail = False  # image export: full detail at any scale
        self.whole_pictures = False  # a grab: the overview's pictures are finished in the frame (finishing())
        self.graph: nx.DiGraph | None = None
        self.layout: Layout | None = None
        self._scale = LogColorScale()
        self.structure: structure_colors.StructureColors | None = None
        self._fixed_range = False
        self.marks_layer = MarkLayer(self)
        self.values = ShownValues()
        self._clear_data()
        self._node_painter = NodePainter(self)
        self.fonts = {"label": style.label_font(), "small": style.small_font(), "header": style.header_font(),
                      "edge": style.font(style.SMALL_PX, 400)}
        self._apply_theme()

    # -- state -------------------------------------------------------------------------
    def _clear_data(self) -> None:
        self.ids: list[str] = []
        self.keys: list[Hashable] = []  # the graph's own node keys (ids may not be strings)
        self.index: dict[Hashable, int] = {}
        self.rects: list[QRectF] = []
        self.kinds: list[str] = []
        self.reachable: list[bool] = []
        self.norms: list[float | None] = []
        # per node, from NodeColors: fill, text, second line, header band (lists of QColor)
        self.fill_colors, self.text_colors, self.secondary_colors, self.header_colors = [], [], [], []
        self._lines: list[tuple[str, str]] = []
        self._elided: dict[int, tuple[str, str]] = {}
        self.items_by_id: dict[str, NodeItem] = {}   # made on first use (node_item)
        self.frame_item: FrameItem | None = None     # the module frames' one item (set_graph)
        self.hits = BoxIndex([])
        self.node_batches: list[NodeBatch] = []
        self.batch_of: list[NodeBatch] = []
        self.edge_batches: list = []
        self.edge_paths: dict[tuple, object] = {}
        self.frames: list[Frame] = []
        self.overview: Overview | None = None   # big graphs: a picture of the whole for far zooms
        self.far_now = False                    # set by the overview each frame: it shows the graph
        self.selected: set[int] = set()
        self.hl_nodes: set[int] = set()
        self._dim: set[int] | None = None
        self.marks_layer.reset()
        self.graph_marks = Marks()         # cut branches and a failing call: part of the graph, never cleared
        self.failed: list[int] = []
        self._rect = QRectF()

    def _apply_theme(self) -> None:
        t = self.theme
        hair = QPen(t.color("edge"), 0)  # width 0 = cosmetic 1 px, the cheapest pen
        edge = QPen(t.color("edge"), 1.25)
        edge.setCapStyle(Qt.RoundCap)
        dashed = QPen(t.color("unreachable"), 1.6, Qt.DashLine)
        self.pens = {
            "edge": edge, "edge_hairline": hair, "edge_label": QPen(t.color("edge_label")),
            "op": QPen(t.color("outline"), 1.0), "leaf": QPen(t.color("outline"), 1.2, Qt.DotLine),
            "param": QPen(t.color("strong_outline"), 2.4), "strong": QPen(t.color("strong_outline"), 1.6),
            "unreachable": dashed, "selected": QPen(t.color("accent"), 3.0),
            "highlight": QPen(t.color("accent"), 2.4),
            "edge_dashed": QPen(t.color("unreachable"), 1.4, Qt.DashLine),   # cut branches
        }
        self.brushes = {"edge": QBrush(t.color("edge"))}
        self.setBackgroundBrush(t.color("background"))
        self._changed()
        self.update()

    def _rows_entered(self, layout: Layout) -> dict[float, list[float]]:
        """Where edges come into each row from above (``frame_room.entries``): frames keep their labels
        left of them."""
        ends = []
        for (u, v), pts in layout.edges.items():
            k = self.index.get(v)
            ends.append((pts, None if k is None else round(self.rects[k].center().y(), 1)))
        return entries(ends)

    def set_theme(self, theme: str | style.Theme) -> None:
        self.theme = style.theme(theme)
        self._apply_theme()
        self.marks_layer.apply_theme()

    # -- building -----------------------------------------------------------------------
    def set_graph(self, graph: nx.DiGraph, layout: Layout) -> None:
        """Replace the scene's content by ``graph`` drawn at ``layout``'s positions; the
        values shown become the graph's own (its traced step and loss)."""
        self._clear_data()  # first: removing items may report selection changes
        self.clear()
        self.graph, self.layout = graph, layout
        for nid, attrs in graph.nodes(data=True):
            if nid not in layout.pos:
                continue
            (cx, cy), (w, h) = layout.pos[nid], layout.size[nid]
            self.index[nid] = len(self.ids)
            if not isinstance(nid, str):
                self.index.setdefault(str(nid), len(self.ids))  # NodeItem ids are strings
            self.ids.append(str(nid))
            self.keys.append(nid)
            self.rects.append(QRectF(cx - w / 2, cy - h / 2, w, h))
            self.kinds.append(attrs.get("kind", "op"))
            self.reachable.append(attrs.get("reachable", True) is not False)
            self.norms.append(attrs.get("grad_norm"))
            self._lines.append(style.node_lines(nid, attrs))
        g = graph.graph
        loss = g.get("loss") if isinstance(g.get("loss"), (int, float)) else None
        self.values = ShownValues("traced", g.get("step"), loss, g.get("step"))
        self.structure = structure_colors.for_graph(graph)   # a graph without values: colours by structure
        if self.structure is not None:
            self.values = ShownValues("structure")
        self.graph_marks, self.failed = graph_marks(graph), failed_indices(self, graph)
        if not self._fixed_range:
            self._scale = LogColorScale(*auto_range(self.norms))
        self._compute_colors()
        self.hits = BoxIndex(self.rects)   # clicks and tooltips: no item per node (node_item)
        bounds = build_node_batches(self)
        build_edges(self, graph, layout)
        self.frames = build_frames(graph, self.index, self.rects, self._rows_entered(layout))
        if self.frames:
            boxes = np.asarray([(r.left(), r.top(), r.right(), r.bottom()) for r in self.rects]).reshape(-1, 4)
            place_labels(self.frames, curve_segments(list(layout.edges.values())), boxes)
        if self.frames:     # the item kept: PySide6 6.11 frees an item only a scene holds on parentItem()
            self.frame_item = FrameItem(self, self.frames)
            self.addItem(self.frame_item)
            for frame in self.frames:
                bounds = bounds.united(frame.path.boundingRect())
        bounds = bounds.united(decorate(self, graph))      # the failing call's error note
        self._rect = bounds.adjusted(-MARGIN, -MARGIN, MARGIN, MARGIN)
        self.overview = add_overview(self, self._rect)
        self.setSceneRect(self._rect)
        self.colorScaleChanged.emit(self.structure or self._scale)
        self.marksChanged.emit(self.marks().styles())

    # -- colours -------------------------------------------------------------------------
    def _compute_colors(self) -> None:
        if self.structure is not None:
            rgb = np.asarray(self.structure.rgb_for(self.graph, self.keys), dtype=np.int64).reshape(-1, 3)
        else:
            rgb = self._scale.colors_for(self.norms)
        colors = NodeColors(rgb.tolist(), self.reachable, self.failed, QColor(*self._scale.color(None)),
                            self.theme.color("broken"))
        self.fill_colors, self.text_colors = colors.fills, colors.texts
        self.secondary_colors, self.header_colors = colors.seconds, colors.headers

    def color_scale(self) -> LogColorScale:
        return self._scale

    def set_color_range(self, lo: float | None, hi: float | None = None, *, follow: bool = False) -> None:
        """Set the colour range. Fixed by default (e.g. across training steps); with
        ``follow=True`` it is only a starting point that live norms may refit; ``None``
        fits it to the current norms and follows them."""
        if lo is None or hi is None:
            self._fixed_range = False
            self._scale = LogColorScale(*auto_range(self.norms))
        else:
            self._fixed_range = not follow
            self._scale = LogColorScale(lo, hi)
        self._recolor()

    def set_color_scale(self, scale: LogColorScale) -> None:
        """A fixed scale with its own colour map (the Compare view colours B/A ratios with one)."""
        self._fixed_range = True
        self._scale = scale
        self._recolor()

    def set_norms(self, norms: Mapping[str, float | None], step: int | None = None,
                  source: str = "live") -> None:
        """New gradient norms for some nodes (live colours) from ``step`` of ``source``
        ('training', 'recorded'); unknown ids are ignored."""
        self.values.source, self.values.norms_step = source, step
        index = self.index
        for nid, value in norms.items():
            i = index.get(nid)
            if i is not None:
                self.norms[i] = value
                if self.kinds[i] == "group":
                    self._refresh_facts(i, value)
        if not self._fixed_range:
            lo, hi = auto_range(self.norms)
            # refit only when the data left the range or shrank a lot: colours should not flicker
            if lo < self._scale.lo or hi > self._scale.hi or hi < self._scale.hi / 100 or lo > self._scale.lo * 100:
                self._scale = LogColorScale(lo, hi)
        self._recolor()

    def _refresh_facts(self, i: int, norm: float | None) -> None:
        """A module box's "grad" figure follows the live norms, as its colour does (for a box
        with parameters the live norm is its parameters' norm: ``Document.view_norms``)."""
        attrs = self.graph.nodes[self.keys[i]] if self.graph is not None else {}
        if not attrs.get("numel") or "facts" not in attrs or self.graph.graph.get("meta"):
            return
        facts = box_facts(attrs["numel"], norm, attrs.get("activation_bytes"), attrs.get("n_nodes", 0), False)
        self.set_second_line(self.ids[i], style.node_lines(self.keys[i], {**attrs, "facts": facts})[1])

    def _recolor(self) -> None:
        self._compute_colors()
        self._changed()
        for batch in self.node_batches:
            batch.recolored()
        self.colorScaleChanged.emit(self.structure or self._scale)

    # -- text ----------------------------------------------------------------------------
    def set_loss(self, value: float | None, step: int | None = None) -> None:
        """The loss shown on the loss node(s) and in an export's header, from ``step``."""
        self.values.loss, self.values.loss_step = value, step
        for i, kind in enumerate(self.kinds):
            if kind == "loss":
                self.set_second_line(self.ids[i], number(value) if value is not None else "")

    def set_second_line(self, nid: str, text: str) -> None:
        """Replace a node's second line (e.g. the loss node's value while training); the box
        keeps its size, the text is elided to it."""
        i = self.index.get(nid)
        if i is None or self._lines[i][1] == text:
            return
        self._lines[i] = (self._lines[i][0], text)
        self._elided.pop(i, None)
        self.batch_of[i].update()

    def primary_text(self, i: int) -> str:
        """The node's first line, whole (e.g. a module box's path)."""
        return self._lines[i][0]

    def text_lines(self, i: int) -> tuple[str, str]:
        """The node's two lines elided to its box (computed on first paint, then cached)."""
        got = self._elided.get(i)
        if got is None:
            got = self._elided[i] = elided_lines(self.rects[i], self.kinds[i], *self._lines[i])
        return got

    def painter_for(self, i: int) -> NodePainter:
        return self._node_painter

    # -- window API ----------------------------------------------------------------------
    def node_item(self, nid: str) -> NodeItem | None:
        """The selectable item of node ``nid`` (made on first use), None if not drawn."""
        item = self.items_by_id.get(nid)
        i = self.index.get(nid) if item is None else None
        if i is not None:
            item = NodeItem(self.ids[i], i, self.rects[i])
            self.addItem(item)
            self.items_by_id[self.ids[i]] = item
        return item

    def node_at(self, pos: QPointF) -> str | None:
        i = self.hits.at(pos.x(), pos.y())
        return None if i is None else self.ids[i]

    def graph_rect(self) -> QRectF:
        return QRectF(self._rect)

    def _changed(self) -> None:
        """Something the overview picture shows changed."""
        if self.overview is not None:
            self.overview.invalidate()

    def dimmed_nodes(self) -> set[int] | None:
        """Indices drawn faded while a highlight is active (None: no highlight)."""
        return self._dim

    def highlight(self, nodes: Iterable[str], edges: Iterable[tuple[str, str]] = ()) -> None:
        """Emphasise ``nodes`` and ``edges``; everything else is faded."""
        self.hl_nodes = {self.index[n] for n in nodes if n in self.index}
        self._dim = set(range(len(self.ids))) - self.hl_nodes
        self.marks_layer.highlight(edges)
        self._repaint_all()

    def clear_highlight(self) -> None:
        self.hl_nodes = set()
        self._dim = None
        self.marks_layer.highlight(())
        self._repaint_all()

    def mark_edges(self, edges: Iterable[tuple[str, str]], style_name: str = "broken") -> None:
        """Draw ``edges`` in a style ('broken': red dashed); an empty list clears that style.

        An edge the layout does not have (e.g. a graph cut) is drawn straight between boxes.
        """
        self.marks_layer.mark_edges(edges, style_name)

    def mark_nodes(self, ids: Iterable[str], style_name: str = "nan-origin") -> None:
        """Put a badge on each node ('nan-origin': red '!'); an empty list clears that style."""
        self.marks_layer.mark_nodes(ids, style_name)

    def clear_marks(self) -> None:
        self.marks_layer.clear_marks()

    def marks(self) -> Marks:
        """The marks drawn now (ids of this scene's graph): the diagnosis marks and the graph's own
        (cut branches, a failing call)."""
        got = self.marks_layer.marks()
        for style_name, edges in self.graph_marks.edges.items():
            got.add_edges(style_name, edges)
        for style_name, ids in self.graph_marks.nodes.items():
            got.add_nodes(style_name, ids)
        return got

    def apply_marks(self, marks: Marks) -> None:
        for style_name, edges in marks.edges.items():
            self.mark_edges(edges, style_name)
        for style_name, ids in marks.nodes.items():
            self.mark_nodes(ids, style_name)

    def shown_state(self, region: str = "whole graph") -> ShownState:
        """What the scene shows besides the graph, for an export's header and legend."""
        g = self.graph if self.graph is not None else nx.DiGraph()
        boxes = [g.nodes[k] for k, kind in zip(self.keys, self.kinds) if kind == "group"]
        title = g.graph.get("model_source") or g.graph.get("script")   # a model without a script: what was named
        return ShownState(title, ShownValues(**vars(self.values)), len(self.ids),
                          [a.get("module", "") for a in boxes if not a.get("fold")], len(self.frames),
                          self.marks().counts(), (self._scale.lo, self._scale.hi), self._fixed_range, region,
                          [str(a.get("label")) for a in boxes if a.get("fold")])

    @contextmanager
    def exporting(self) -> Iterator[None]:
        """Paint as an export: every label at any scale; no selection or hover highlight
        (they are the pointer's state, not the graph's)."""
        saved = (self.force_detail, self.selected, self.hl_nodes, self._dim)
        self.force_detail, self.selected, self.hl_nodes, self._dim = True, set(), set(), None
        self.far_now = False
        self.marks_layer.set_highlight_visible(False)
        self.marks_layer.set_screen_sized(False)
        try:
            yield
        finally:
            self.force_detail, self.selected, self.hl_nodes, self._dim = saved
            self.marks_layer.set_highlight_visible(True)
            self.marks_layer.set_screen_sized(True)

    @contextmanager
    def finishing(self) -> Iterator[None]:
        """Paint whole frames (a screenshot): the overview finishes its pictures in the frame
        instead of a slice per frame."""
        saved, self.whole_pictures = self.whole_pictures, True
        try:
            yield
        finally:
            self.whole_pictures = saved

    def _repaint_all(self) -> None:
        self._changed()
        for batch in self.node_batches:
            batch.update()
        for batch in self.edge_batches:
            batch.update()

    def selection_changed(self, i: int, selected: bool) -> None:
        """Called by ``NodeItem`` when its selection flips: repaint just that box."""
        if selected:
            self.selected.add(i)
        else:
            self.selected.discard(i)
        if i < len(self.batch_of) and self.batch_of[i] is not None:
            self.batch_of[i].update(self.rects[i].adjusted(-3, -3, 3, 3))

    # -- mouse ---------------------------------------------------------------------------
    def helpEvent(self, event) -> None:
        nid = self.node_at(event.scenePos())
        if nid is None or self.graph is None:
            QToolTip.hideText()
            return
        QToolTip.showText(event.screenPos(), style.tooltip_text(nid, self.graph.nodes[self.keys[self.index[nid]]]))
        event.accept()

    def _item_under(self, event: QGraphicsSceneMouseEvent) -> None:
        nid = self.node_at(event.scenePos())
        if nid is not None:
            self.node_item(nid)   # exists before Qt looks for what to select

    def mousePressEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        self._item_under(event)
        super().mousePressEvent(event)
        if event.button() == Qt.LeftButton:
            nid = self.node_at(event.scenePos())
            if nid is None:
                self.backgroundClicked.emit()
            else:
                self.nodeClicked.emit(nid)

    def mouseDoubleClickEvent(self, event: QGraphicsSceneMouseEvent) -> None:
        self._item_under(event)
        super().mouseDoubleClickEvent(event)
        nid = self.node_at(event.scenePos())
        if nid is not None and event.button() == Qt.LeftButton:
            self.nodeDoubleClicked.emit(nid)
