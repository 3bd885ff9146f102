"""The whole of a big graph as one cached picture, for zoom levels where the graph is a texture.

At Fit a 100k-node graph is a few hundred pixels wide and every box is a fraction of a pixel,
yet painting it draws 100k boxes, 150k edges and thousands of module frames (0.3-0.7 s a
frame). Below ``lod`` (screen pixels per scene pixel), ``Overview`` paints a picture of the
graph (the same batches painting into an image, once per power-of-two zoom level visited)
and the batches skip painting. The pictures are remade when next needed after anything they
show changes (colours, highlight, theme; a selection outline is not drawn that far out).
Exports never use them (``GraphScene.exporting``: full detail).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QImage, QPainter, QPainterPath, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from gradviz.render.frames import FrameItem
from gradviz.render.items import Batch, lod_of

if TYPE_CHECKING:
    from gradviz.render.scene import GraphScene

MIN_NODES = 20_000          # smaller graphs paint fast enough at any zoom
MAX_SIDE = 16384            # the picture's longer side, pixels (a slim graph: 16384 x 6)
MAX_PIXELS = 8_000_000      # and its area (32 MB)
MAX_LOD = 0.15              # never used where boxes are bigger than this on screen
OVERVIEW_Z = -10.0


def overview_lod(rect: QRectF, nodes: int) -> float:
    """Zoom at and below which a graph covering ``rect`` with ``nodes`` boxes is painted from
    its overview picture (0: never)."""
    if nodes < MIN_NODES or rect.isEmpty():
        return 0.0
    return min(MAX_SIDE / max(rect.width(), rect.height()), math.sqrt(MAX_PIXELS / (rect.width() * rect.height())),
               MAX_LOD)


def add_overview(scene: "GraphScene", rect: QRectF) -> "Overview | None":
    """The overview item of a scene whose graph covers ``rect`` (None: small enough to paint)."""
    lod = overview_lod(rect, len(scene.ids))
    if lod <= 0:
        return None
    item = Overview(scene, rect, lod)
    scene.addItem(item)
    return item


class Overview(QGraphicsItem):
    """The cached picture of the whole graph, under everything else."""

    def __init__(self, scene: "GraphScene", rect: QRectF, lod: float) -> None:
        super().__init__()
        self._scene = scene
        self._rect = QRectF(rect)
        self.lod = lod
        self._levels: dict[int, QImage] = {}  # level k: the picture at self.lod / 2**k, made when needed
        self.renders = 0                     # how many times the picture was made (tests)
        self.painting = False                # True while the items paint into the picture
        self.setZValue(OVERVIEW_Z)
        self.setAcceptedMouseButtons(Qt.NoButton)

    def boundingRect(self) -> QRectF:
        return self._rect

    def shape(self) -> QPainterPath:
        return QPainterPath()

    def covers(self, lod: float) -> bool:
        """Whether a frame at ``lod`` shows this picture (the items then paint only live labels)."""
        return lod <= self.lod and not self.painting and not self._scene.force_detail

    def invalidate(self) -> None:
        """What the picture shows changed: remake it when next needed."""
        if self._levels:
            self._levels = {}
            self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        # painted first in every frame that paints any of the graph (lowest z, covers it all):
        # tells the items whether this frame is far (scene.far_now) so they need not ask
        lod = lod_of(painter)
        far = self.covers(lod)
        image = self._image_for(lod) if far else None     # may paint the items into the picture first
        self._scene.far_now = far
        if image is None:
            return
        target = QRectF(self._rect)
        # a graph thinner than a pixel on screen stays a pixel wide, as its hairline edges would
        grow_x, grow_y = max(0.0, 1.0 / lod - target.width()), max(0.0, 1.0 / lod - target.height())
        painter.setRenderHint(QPainter.SmoothPixmapTransform, True)
        painter.drawImage(target.adjusted(-grow_x / 2, -grow_y / 2, grow_x / 2, grow_y / 2), image)

    def _image_for(self, lod: float) -> QImage:
        """The picture at the level for ``lod``: painted at ``self.lod / 2**k``, the closest
        resolution at or above the screen's, so it is drawn at 1/2 to 1 of its size and hairlines
        stay near a pixel wide (a picture scaled down further fades them)."""
        level = max(0, min(int(math.log2(self.lod / max(lod, 1e-12))), 24))
        if level not in self._levels:
            self._levels[level] = self._render(self.lod / 2 ** level)
        return self._levels[level]

    def _render(self, lod: float) -> QImage:
        """Paint the graph's own items (frames, edges, boxes; not the marks drawn over them) into
        a picture ``lod`` pixels per scene pixel, as the window's view at that zoom would (no
        antialiasing that far out)."""
        sc = self._scene
        w = max(1, math.ceil(self._rect.width() * lod))
        h = max(1, math.ceil(self._rect.height() * lod))
        image = QImage(w, h, QImage.Format_ARGB32_Premultiplied)
        image.fill(sc.theme.color("background"))
        painter = QPainter(image)
        view = QTransform.fromScale(w / self._rect.width(), h / self._rect.height())
        view.translate(-self._rect.left(), -self._rect.top())
        option = QStyleOptionGraphicsItem()
        items = [i for i in sc.items(Qt.AscendingOrder) if isinstance(i, (Batch, FrameItem))]   # paint order
        self.painting, sc.far_now = True, False
        try:
            for item in items:
                painter.save()
                painter.setWorldTransform(view)
                option.exposedRect = item.boundingRect()
                item.paint(painter, option, None)
                painter.restore()
        finally:
            self.painting = False
        painter.end()
        self.renders += 1
        return image
