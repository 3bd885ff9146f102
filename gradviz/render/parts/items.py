"""Graphics items of ``GraphScene``.

Speed comes from batching: the drawing is done by ``NodeBatch`` / ``EdgeBatch`` items that
each paint ~100 nearby nodes or edges in one Python call. A ``NodeItem`` (hit area, selection,
``centerOn``; no contents of its own) is made only for a node that is clicked or selected. Zoomed far out a batch paints its nodes with one ``drawRects`` per
colour, so a frame of 11,600 nodes is about a hundred Python calls, not 30,000.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QPainter, QPainterPath
from PySide6.QtWidgets import QGraphicsItem, QGraphicsRectItem, QStyleOptionGraphicsItem

from gradviz.render.parts.scene_reads import NodeBuild, NodeTable, PaintState
from gradviz.render.primitives.far_labels import paint_far_label
from gradviz.render.primitives.paint_stats import PAINT_STATS
from gradviz.render.primitives.tiles import boxes_array, kd_chunks, union_rect

# Level of detail (screen pixels per scene pixel) below which things are left out.
SIMPLE_LOD = 0.3        # below: nodes are plain filled rectangles, edges hairlines without arrows
TEXT_LOD = 0.45         # below: no node text (12 px text would be < 5.5 px tall)
EDGE_LABEL_LOD = 0.7    # below: no tensor-shape labels on edges
GROUP_TEXT_LOD = 0.5    # below: module box names at a fixed 11 screen px (the first view calls 0.5 legible:
                        # app/first_view.LEGIBLE_SCALE; between the two the names covered the boxes)

NODES_PER_BATCH = 128   # at most: k-d chunks hold 64-128 boxes
_SELECTED_CHANGED = QGraphicsItem.ItemSelectedHasChanged


def lod_of(painter: QPainter) -> float:
    return QStyleOptionGraphicsItem.levelOfDetailFromTransform(painter.worldTransform())


def visible_area(painter: QPainter, option: QStyleOptionGraphicsItem, whole: bool = False) -> QRectF:
    """The part of an item that can show: its exposed rect, cut to the paint device. Qt gives a
    painting outside a view's paint event (``QGraphicsView.render``, ``QGraphicsScene.render``)
    the item's whole bounding rect as exposed, which for a long frame or edge is the whole
    graph. ``whole`` (an export): the exposed rect as given, no cut."""
    rect = option.exposedRect
    device = painter.device()
    if whole or device is None or device.width() <= 0 or device.height() <= 0:
        return rect
    inverse, ok = painter.worldTransform().inverted()
    if ok:
        rect = rect.intersected(inverse.mapRect(QRectF(0, 0, device.width(), device.height())))
    return rect


def build_node_batches(scene: NodeBuild) -> QRectF:
    """Add the scene's ``NodeBatch`` items (nearby boxes, ``NODES_PER_BATCH`` at most) and fill
    ``scene.node_batches`` / ``batch_of``; returns the rectangle covering all boxes.

    No ``NodeItem`` is made here: one is made when first asked for (``GraphScene.node_item``:
    a click, the window selecting); 100k items in the scene's index made every frame walk them."""
    scene.batch_of = [None] * len(scene.ids)  # type: ignore[list-item]
    if not scene.rects:
        return QRectF(0, 0, 1, 1)
    boxes = boxes_array(scene.rects)
    for chunk in kd_chunks(boxes, NODES_PER_BATCH):
        indices = chunk.tolist()
        batch = NodeBatch(scene, indices, union_rect(boxes[chunk]).adjusted(-3, -3, 3, 3))  # thick outlines
        scene.addItem(batch)
        scene.node_batches.append(batch)
        for i in indices:
            scene.batch_of[i] = batch
    return union_rect(boxes)


class NodeItem(QGraphicsRectItem):
    """One node: selectable hit area with no paint of its own (its ``NodeBatch`` draws it)."""

    def __init__(self, node_id: str, index: int, rect: QRectF) -> None:
        super().__init__(rect)
        self.node_id = node_id
        self.index = index
        self.setFlags(QGraphicsItem.ItemHasNoContents | QGraphicsItem.ItemIsSelectable)
        self.setZValue(2)

    def itemChange(self, change: QGraphicsItem.GraphicsItemChange, value):
        # Selection is drawn by the batch; tell the scene directly, since a window may
        # change selection with the scene's signals blocked (no selectionChanged then).
        # Called ~8 times per item while building: keep it lean (the base returns value).
        if change == _SELECTED_CHANGED:
            scene = self.scene()
            if scene is not None and hasattr(scene, "selection_changed"):
                scene.selection_changed(self.index, bool(value))
        return value


class Batch(QGraphicsRectItem):
    """Common part: a fixed bounding rect, never hit by clicks, exposed-rect aware.

    A rect item without a pen, so Qt asks its bounding rect in C++: it does so several times
    per item and frame, and a Python ``boundingRect`` made that a call into Python each time."""

    def __init__(self, scene: PaintState, rect: QRectF) -> None:
        super().__init__(rect)
        self._scene = scene
        self.setPen(Qt.NoPen)
        self.setFlag(QGraphicsItem.ItemUsesExtendedStyleOption)  # gives option.exposedRect
        self.setAcceptedMouseButtons(Qt.NoButton)

    def shape(self) -> QPainterPath:
        return QPainterPath()  # empty: clicks and rubber bands go through to NodeItems

    def begin_edges(self, painter: QPainter) -> float:
        """Painter state shared by the edge items (faded under a highlight, no fill); the lod."""
        if self._scene.dimmed_nodes() is not None:
            painter.setOpacity(self._scene.theme.dim_opacity)
        painter.setBrush(Qt.NoBrush)
        return lod_of(painter)


class NodeBatch(Batch):
    _scene: NodeTable

    def __init__(self, scene: NodeTable, indices: list[int], rect: QRectF) -> None:
        super().__init__(scene, rect)
        self.indices = indices
        self.groups = [i for i in indices if scene.kinds[i] == "group"]   # collapsed modules: far labels
        self.setZValue(1)
        self._by_color: list | None = None  # [(QColor, [QRectF])], rebuilt after recolouring

    def recolored(self) -> None:
        self._by_color = None
        self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        sc = self._scene
        if sc.far_now:       # the overview picture shows the boxes; names stay live, screen-sized
            if self.groups:
                self._far_labels(painter, lod_of(painter))
            return
        lod = lod_of(painter)
        dim = sc.dimmed_nodes()
        if lod < SIMPLE_LOD and not sc.force_detail:
            PAINT_STATS["simple_batches"] += 1
            if self._by_color is None:
                groups: dict[int, tuple] = {}
                for i in self.indices:
                    color = sc.fill_colors[i]
                    groups.setdefault(color.rgba(), (color, []))[1].append(sc.rects[i])
                self._by_color = list(groups.values())
            painter.setPen(Qt.NoPen)
            if dim is not None:
                painter.setOpacity(sc.theme.dim_opacity)
            for color, rects in self._by_color:
                painter.setBrush(color)
                painter.drawRects(rects)
            if dim is not None:  # highlighted nodes again, at full strength
                painter.setOpacity(1.0)
                for i in self.indices:
                    if i not in dim:
                        painter.setBrush(sc.fill_colors[i])
                        painter.drawRect(sc.rects[i])
            self._far_labels(painter, lod)
            return
        exposed = visible_area(painter, option, sc.force_detail)
        with_text = lod >= TEXT_LOD or sc.force_detail
        far_groups = lod < GROUP_TEXT_LOD and not sc.force_detail
        for i in self.indices:
            rect = sc.rects[i]
            if rect.intersects(exposed):
                if dim is not None:
                    painter.setOpacity(sc.theme.dim_opacity if i in dim else 1.0)
                sc.painter_for(i).paint(painter, i, with_text and not (far_groups and sc.kinds[i] == "group"))
        if dim is not None:
            painter.setOpacity(1.0)
        if far_groups:
            self._far_labels(painter, lod)

    def _far_labels(self, painter: QPainter, lod: float) -> None:
        """Zoomed out, collapsed module boxes keep their name at a readable screen size."""
        sc = self._scene
        if sc.overview is not None and sc.overview.painting:
            return       # not into the picture: it is scaled, the names must stay screen-sized
        for i in self.groups:
            paint_far_label(painter, sc.rects[i].adjusted(0, 6, 0, 0), sc.primary_text(i), lod, sc.text_colors[i])


class EdgeBatch(Batch):
    """Edges as one pre-built path (smooth cubic curves) plus arrowheads and shape labels."""

    def __init__(self, scene: PaintState, rect: QRectF, curves: QPainterPath, lines: QPainterPath,
                 arrows: QPainterPath, labels: list[tuple[QPointF, str]], dashed: bool = False) -> None:
        super().__init__(scene, rect)
        self.curves, self.lines, self.arrows, self.labels = curves, lines, arrows, labels
        self.dashed = dashed        # the edges of a cut branch
        self.setZValue(0)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        sc = self._scene
        if sc.far_now:
            return
        lod = self.begin_edges(painter)
        if lod < SIMPLE_LOD and not sc.force_detail:
            painter.setPen(sc.pens["edge_hairline"])  # cosmetic 1 px, straight segments: cheap
            painter.drawPath(self.lines)
            return
        painter.setPen(sc.pens["edge_dashed" if self.dashed else "edge"])
        painter.drawPath(self.curves)
        painter.setPen(Qt.NoPen)
        painter.setBrush(sc.brushes["edge"])
        painter.drawPath(self.arrows)
        if self.labels and (lod >= EDGE_LABEL_LOD or sc.force_detail):
            painter.setFont(sc.fonts["edge"])
            painter.setPen(sc.pens["edge_label"])
            exposed = visible_area(painter, option, sc.force_detail).adjusted(-90, -12, 90, 12)  # a label starts left of what it covers
            for point, text in self.labels:
                if exposed.contains(point):
                    painter.drawText(point, text)
                    PAINT_STATS["edge_labels"] += 1
