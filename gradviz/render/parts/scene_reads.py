"""What the scene's parts read of it, as Protocols: the items, builders and overlays take these
instead of ``GraphScene``, so none of them imports the scene (which imports them all). Each is
what its readers use, no more; ``GraphScene`` provides every one of them.

    PaintState   every painted item, each frame (node and edge batches, long edges, module frames)
    NodeTable    node batches and the node painter: the per-node lists (index i: the node's position)
    NodeBuild    ``items.build_node_batches``          EdgeBuild   ``edges.build_edges``
    MarkHost     ``marks_layer.MarkLayer`` and ``graph_marks.decorate``
    OverviewHost ``overview.Overview``: the picture of a big graph
"""
from __future__ import annotations

from typing import Hashable, Protocol

import networkx as nx
from PySide6.QtCore import QRectF, Qt, SignalInstance
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QGraphicsItem

from gradviz.core.output.marks import Marks
from gradviz.render.primitives.style import Theme


class Canvas(Protocol):
    """Where items go: the scene's own ``QGraphicsScene`` methods."""

    def addItem(self, item: QGraphicsItem) -> None: ...        # noqa: N802 (Qt's names)

    def removeItem(self, item: QGraphicsItem) -> None: ...     # noqa: N802

    def items(self, order: Qt.SortOrder = ...) -> list[QGraphicsItem]: ...


class Picture(Protocol):
    """The overview picture, as items see it."""
    painting: bool          # the items are painting into the picture now (no screen-sized labels in it)


class PaintState(Protocol):
    """What a painted item reads of its scene each frame."""
    theme: Theme
    force_detail: bool      # an export: full detail at any scale
    far_now: bool           # this frame the overview picture shows the graph: items paint only live labels
    overview: Picture | None
    pens: dict[str, QPen]
    brushes: dict[str, QBrush]
    fonts: dict[str, QFont]

    def dimmed_nodes(self) -> set[int] | None: ...


class NodePaint(Protocol):
    def paint(self, painter: QPainter, i: int, with_text: bool) -> None: ...


class NodeTable(PaintState, Protocol):
    """The scene's per-node lists, indexed by the node's position, and its text per node."""
    graph: nx.DiGraph | None
    keys: list[Hashable]    # the graph's own node keys
    rects: list[QRectF]
    kinds: list[str]
    reachable: list[bool]
    fill_colors: list[QColor]
    text_colors: list[QColor]
    secondary_colors: list[QColor]
    header_colors: list[QColor]
    selected: set[int]
    hl_nodes: set[int]

    def primary_text(self, i: int) -> str: ...

    def text_lines(self, i: int) -> tuple[str, str]: ...

    def painter_for(self, i: int) -> NodePaint: ...


class NodeBuild(NodeTable, Canvas, Protocol):
    """Where the node batches go, and which batch paints each node."""
    ids: list[str]
    node_batches: list
    batch_of: list


class EdgeBuild(PaintState, Canvas, Protocol):
    """Which nodes are drawn, and where the edge items and each edge's curve go."""
    index: dict[Hashable, int]
    edge_paths: dict[tuple, QPainterPath]
    edge_batches: list


class MarkHost(Canvas, Protocol):
    """What the overlays (marks, highlight, the failing call's note) read and add to."""
    theme: Theme
    keys: list[Hashable]
    index: dict[Hashable, int]
    rects: list[QRectF]
    edge_paths: dict[tuple, QPainterPath]
    marksChanged: SignalInstance        # noqa: N815 (Qt's name)

    def marks(self) -> Marks: ...


class OverviewHost(Canvas, Protocol):
    """What the overview reads of its scene (and ``far_now``, which it sets each frame)."""
    theme: Theme
    ids: list[str]
    force_detail: bool
    whole_pictures: bool    # a grab: pictures are finished in the frame
    far_now: bool
