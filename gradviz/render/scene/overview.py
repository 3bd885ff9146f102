"""The whole of a big graph as one cached picture, for zoom levels where the graph is a texture.

At Fit a 100k-node graph is a few hundred pixels wide and every box is a fraction of a pixel,
yet painting it draws 100k boxes, 150k edges and thousands of module frames (0.3-0.7 s a
frame). Below ``lod`` (screen pixels per scene pixel), ``Overview`` paints a picture of the
graph (the same batches painting into an image, once per power-of-two zoom level visited)
and the batches skip painting. The pictures are remade when next needed after anything they
show changes (colours, highlight, theme; a selection outline is not drawn that far out).
Exports never use them (``GraphScene.exporting``: full detail).

Making a picture takes 0.2-1 s on a 100k-node graph, too long for one frame. In a view's
frame it is made in bands of rows, ``SLICE_S`` of work per frame, each frame asking for the
next: until it is done the view shows the last finished picture of that level (older
colours, replaced within the second), else the nearest finished level, else the bands made so
far. Paintings outside a view's frame (the overview map, a grab, tests) finish it at once.
"""
from __future__ import annotations

import math
import time
import numpy as np
import shiboken6
from PySide6.QtCore import QRectF, Qt, QTimer
from PySide6.QtGui import QImage, QPainter, QPainterPath, QTransform
from PySide6.QtWidgets import QGraphicsItem, QStyleOptionGraphicsItem

from gradviz.render.parts.frames import FrameItem
from gradviz.render.parts.items import Batch, lod_of
from gradviz.render.parts.long_edges import LongEdges
from gradviz.render.parts.scene_reads import OverviewHost

MIN_NODES = 20_000          # smaller graphs paint fast enough at any zoom
MAX_SIDE = 16384            # the picture's longer side, pixels (a slim graph: 16384 x 6)
MAX_PIXELS = 8_000_000      # and its area (32 MB)
MAX_LOD = 0.15              # never used where boxes are bigger than this on screen
OVERVIEW_Z = -10.0
SLICE_S = 0.010             # picture-making per view frame, seconds (a far frame is ~15-25 ms more: under 50 ms)
FIRST_BAND_ROWS = 16        # rows of the first band; later bands sized to about a third of a slice
FIRST_LINES = 2000          # long edges in the first part; later parts sized the same way


def overview_lod(rect: QRectF, nodes: int) -> float:
    """Zoom at and below which a graph covering ``rect`` with ``nodes`` boxes is painted from
    its overview picture (0: never)."""
    if nodes < MIN_NODES or rect.isEmpty():
        return 0.0
    return min(MAX_SIDE / max(rect.width(), rect.height()), math.sqrt(MAX_PIXELS / (rect.width() * rect.height())),
               MAX_LOD)


def add_overview(scene: OverviewHost, rect: QRectF) -> "Overview | None":
    """The overview item of a scene whose graph covers ``rect`` (None: small enough to paint)."""
    lod = overview_lod(rect, len(scene.ids))
    if lod <= 0:
        return None
    item = Overview(scene, rect, lod)
    scene.addItem(item)
    item._layers()          # with the scene's build, not in the first far frame (10-15 ms of 100k items)
    return item


class Overview(QGraphicsItem):
    """The cached picture of the whole graph, under everything else."""

    def __init__(self, scene: OverviewHost, rect: QRectF, lod: float) -> None:
        super().__init__()
        self._scene = scene
        self._rect = QRectF(rect)
        self.lod = lod
        self._levels: dict[int, _Picture] = {}  # level k: the picture at self.lod / 2**k, made when needed
        self._shown: dict[int, _Picture] = {}   # level k: its last finished picture (shown while the next is made)
        self._generation = 0                    # bumped when what the pictures show changes
        self.renders = 0                     # how many pictures were finished (tests)
        self.painting = False                # True while the items paint into the picture
        self._plan: list[tuple] | None = None  # the items to paint, in layers (made once: they do not change)
        self._asked = False                  # a frame is already asked for to go on making a picture
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
        """What the picture shows changed: remake it when next needed (the old one is shown until then)."""
        self._generation += 1
        if self._levels:
            self.update()

    def complete(self, level: int) -> bool:
        """Whether level ``level``'s picture is made and shows the scene as it is now."""
        pic = self._shown.get(level)
        return pic is not None and pic.generation == self._generation

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        # painted first in every frame that paints any of the graph (lowest z, covers it all):
        # tells the items whether this frame is far (scene.far_now) so they need not ask
        lod = lod_of(painter)
        far = self.covers(lod)
        # a view's frame makes pictures a slice at a time; any other painting finishes them
        in_frame = widget is not None and not self._scene.whole_pictures
        image = self._image_for(lod, SLICE_S if in_frame else math.inf) if far else None
        self._scene.far_now = far
        if image is None:
            return
        target = QRectF(self._rect)
        # a graph thinner than a pixel on screen stays a pixel wide, as its hairline edges would
        grow_x, grow_y = max(0.0, 1.0 / lod - target.width()), max(0.0, 1.0 / lod - target.height())
        painter.setRenderHint(QPainter.SmoothPixmapTransform, True)
        painter.drawImage(target.adjusted(-grow_x / 2, -grow_y / 2, grow_x / 2, grow_y / 2), image)

    def _image_for(self, lod: float, budget: float) -> QImage:
        """The picture at the level for ``lod``: painted at ``self.lod / 2**k``, the closest
        resolution at or above the screen's, so it is drawn at 1/2 to 1 of its size and hairlines
        stay near a pixel wide (a picture scaled down further fades them). Made or remade for
        ``budget`` seconds; what to show meanwhile is the module's docstring."""
        level = max(0, min(int(math.log2(self.lod / max(lod, 1e-12))), 24))
        pic = self._levels.get(level)
        if pic is None or (pic.done and pic.generation != self._generation):
            pic = self._levels[level] = _Picture(self._scene, self._rect, self.lod / 2 ** level, self._generation,
                                                 self._layers())
        if not pic.done:
            self.painting, self._scene.far_now = True, False
            try:
                pic.advance(budget)
            finally:
                self.painting = False
            if pic.done:
                self._shown[level] = pic
                self.renders += 1
        if not pic.done or pic.generation != self._generation:
            self._ask_for_a_frame()
        if level in self._shown:
            return self._shown[level].image
        if self._shown:      # the nearest finished level, scaled
            return self._shown[min(self._shown, key=lambda k: abs(k - level))].image
        return pic.image

    def _layers(self) -> list[tuple]:
        """The graph's own items in paint order, in layers: runs of ordinary items (with their
        extents, to pick those crossing a band) and each ``LongEdges`` alone."""
        if self._plan is None:
            runs: list[tuple] = []
            for item in self._scene.items(Qt.AscendingOrder):
                if isinstance(item, LongEdges):
                    runs.append((item, []))
                elif isinstance(item, (Batch, FrameItem)):
                    if not runs or runs[-1][0] is not None:
                        runs.append((None, []))
                    runs[-1][1].append(item)
            self._plan = []
            for lines, items in runs:
                rects = [i.sceneBoundingRect() for i in items]
                self._plan.append((lines, items, np.array([r.top() for r in rects]), np.array([r.bottom() for r in rects])))
        return self._plan

    def _ask_for_a_frame(self) -> None:
        """Another frame soon, to go on making the picture (once per frame)."""
        if self._asked:
            return
        self._asked = True

        def again() -> None:
            if shiboken6.isValid(self):     # the scene may have dropped the item meanwhile
                self._asked = False
                self.update()
        QTimer.singleShot(0, again)


class _Picture:
    """One picture of the graph's own items (frames, edges, boxes; not the marks drawn over
    them) at ``lod`` pixels per scene pixel, as the window's view at that zoom paints them (no
    antialiasing that far out), made a part at a time in paint order: runs of items in bands of
    rows (only those crossing a band paint, cut to it), the long edges (whose strokes cross
    every band) some lines at a time."""

    def __init__(self, scene: OverviewHost, rect: QRectF, lod: float, generation: int, plan: list[tuple]) -> None:
        self.generation = generation
        w = max(1, math.ceil(rect.width() * lod))
        h = max(1, math.ceil(rect.height() * lod))
        self.image = QImage(w, h, QImage.Format_ARGB32_Premultiplied)
        self.image.fill(scene.theme.color("background"))
        self.view = QTransform.fromScale(w / rect.width(), h / rect.height())
        self.view.translate(-rect.left(), -rect.top())
        self.layers = [_Layer(*part, total=h if part[0] is None else len(part[0].lines)) for part in plan]
        self.layer = 0

    @property
    def done(self) -> bool:
        return self.layer >= len(self.layers)

    def advance(self, budget: float) -> None:
        """Paint parts until done or ``budget`` seconds are spent (a part at least)."""
        start = time.perf_counter()
        painter = QPainter(self.image)
        try:
            while not self.done:
                layer = self.layers[self.layer]
                layer.paint_part(painter, self, budget)
                if layer.done:
                    self.layer += 1
                if time.perf_counter() - start >= budget:
                    break
        finally:
            painter.end()


class _Layer:
    """Consecutive items of one kind in paint order: ordinary items (made in bands of image rows)
    or one ``LongEdges`` (made some lines at a time)."""

    def __init__(self, lines: "LongEdges | None", items: list, tops: np.ndarray, bottoms: np.ndarray,
                 total: int) -> None:
        self.lines, self.items, self.tops, self.bottoms = lines, items, tops, bottoms
        self.total = total                 # image rows (items) or lines (long edges)
        self.pos = 0                       # the next of them to paint
        self.step = FIRST_BAND_ROWS if lines is None else FIRST_LINES

    @property
    def done(self) -> bool:
        return self.pos >= self.total

    def paint_part(self, painter: QPainter, pic: _Picture, budget: float) -> None:
        t = time.perf_counter()
        count = self.total - self.pos if math.isinf(budget) else min(self.step, self.total - self.pos)
        if self.lines is None:
            self._paint_band(painter, pic, self.pos, count)
        else:
            painter.save()
            painter.setWorldTransform(pic.view)
            self.lines.paint_lines(painter, np.arange(self.pos, self.pos + count))
            painter.restore()
        self.pos += count
        if math.isfinite(budget):      # the next part: about a third of a slice of work, growing at most 2x
            per_unit = (time.perf_counter() - t) / max(count, 1)
            self.step = max(1, min(2 * count, int(budget / 3 / max(per_unit, 1e-8))))

    def _paint_band(self, painter: QPainter, pic: _Picture, row: int, rows: int) -> None:
        band = QRectF(0, row, pic.image.width(), rows)
        scene_band = pic.view.inverted()[0].mapRect(band)
        crossing = np.flatnonzero((self.tops <= scene_band.bottom()) & (self.bottoms >= scene_band.top()))
        painter.save()
        painter.setClipRect(band)
        option = QStyleOptionGraphicsItem()
        for k in crossing.tolist():
            item = self.items[k]
            painter.save()
            painter.setWorldTransform(pic.view)
            option.exposedRect = item.mapRectFromScene(scene_band).intersected(item.boundingRect())
            item.paint(painter, option, None)
            painter.restore()
        painter.restore()
