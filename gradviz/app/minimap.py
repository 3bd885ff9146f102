"""An overview of the graph in a corner of the view, with the visible area drawn; click or
drag on it to move there.

A graph of ordinary proportions is drawn whole. A tall one (a transformer tower, a deep
ResNet) would be a thin strip at that scale, so it is drawn at a width where its boxes
and branches can be told apart, and the map shows the stretch of it around what the view
shows, scrolling along as the view moves (as a code editor's minimap does).

It paints a pixmap rendered once from the scene (re-rendered, debounced, when the scene
changes) instead of being a second live ``QGraphicsView``: re-drawing ten thousand items
on every scroll would double the cost of panning.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QWidget

MAX_SIDE = 180           # a graph of ordinary proportions fits in this square
MIN_WIDTH = 70           # narrower than this, a tall graph is drawn at TALL_WIDTH instead
TALL_WIDTH = 120
MAX_HEIGHT_SHARE = 0.6   # of the view's height, at most
MAX_PIXMAP = 6000        # pixels along the long side of the rendered pixmap
PAD = 4


class Minimap(QWidget):
    def __init__(self, view) -> None:
        super().__init__(view)
        self._view = view
        self._pixmap: QPixmap | None = None
        self._source = QRectF()      # the scene rect drawn into the pixmap (a band of a very tall graph)
        self._whole = QRectF()       # the graph's rect
        self._scale = 1.0            # pixmap pixels per scene unit
        self._offset = 0.0           # pixmap rows above the part shown (tall graphs)
        self._dragging = False       # the map holds still under the mouse while it drags
        self.setObjectName("minimap")
        self.setCursor(Qt.PointingHandCursor)
        self.setToolTip("Overview: click or drag to move the view")
        self._rerender = QTimer(self, singleShot=True, interval=400, timeout=self.render_scene)
        view.scene().changed.connect(lambda _: self._rerender.start())
        view.viewportMoved.connect(self.refresh)
        view.zoomChanged.connect(lambda _: self.refresh())
        self.wanted = True   # the user's View ▸ Overview map choice
        self.hide()

    @property
    def tall(self) -> bool:
        """Whether the map shows a scrolling stretch of a tall graph instead of all of it."""
        return self._pixmap is not None and self._pixmap_size().height() > self._max_height()

    def _max_height(self) -> int:
        return max(MAX_SIDE, int(self._view.viewport().height() * MAX_HEIGHT_SHARE))

    def _pixmap_size(self) -> QSize:
        return QSize(max(int(self._source.width() * self._scale), 24), max(int(self._source.height() * self._scale), 24))

    def render_scene(self) -> None:
        scene = self._view.scene()
        rect = scene.graph_rect()
        if rect.isEmpty():
            self._pixmap = None
            self.hide()
            return
        rect = rect.adjusted(-10, -10, 10, 10)
        scale = min(MAX_SIDE / rect.width(), self._max_height() / rect.height())
        self._whole = rect
        if rect.width() * scale < MIN_WIDTH:      # a thin strip: draw it wider and let the map scroll
            scale = TALL_WIDTH / rect.width()
            if rect.height() * scale > MAX_PIXMAP:
                # taller than one pixmap at that width (200 transformer blocks): draw the band around
                # what the view shows, re-drawn when the view leaves it (it was a 24 px wide strip)
                rect = self._band(rect, MAX_PIXMAP / scale)
        self._source, self._scale = rect, scale
        size = self._pixmap_size()
        ratio = self.devicePixelRatioF()
        pm = QPixmap(size * ratio)
        pm.setDevicePixelRatio(ratio)
        pm.fill(Qt.transparent)
        painter = QPainter(pm)
        painter.setRenderHint(QPainter.Antialiasing, True)
        scene.render(painter, QRectF(0, 0, size.width(), size.height()), rect, Qt.IgnoreAspectRatio)
        painter.end()
        self._pixmap = pm
        self.resize(size.width() + 2 * PAD, min(size.height(), self._max_height()) + 2 * PAD)
        self.place()
        self.refresh()

    def _band(self, whole: QRectF, height: float) -> QRectF:
        """The stretch of ``whole``, ``height`` high, centred on the view's middle where it can be."""
        middle = self._view.visible_scene_rect().center().y()
        top = min(max(whole.top(), middle - height / 2), whole.bottom() - height)
        return QRectF(whole.left(), top, whole.width(), height)

    def _left_band(self, visible: QRectF) -> bool:
        """The view's middle is out of the band's middle half (the map needs the next stretch)."""
        src, y = self._source, visible.center().y()
        if y < src.top() + src.height() / 4:
            return src.top() > self._whole.top() + 1
        if y > src.bottom() - src.height() / 4:
            return src.bottom() < self._whole.bottom() - 1
        return False

    def refresh(self) -> None:
        """Shown only when it helps: part of the graph is out of view. A tall map follows the view."""
        if self._pixmap is None:
            return
        visible = self._view.visible_scene_rect()
        if self.tall and not self._dragging:
            shown_h = self.height() - 2 * PAD
            middle = (visible.center().y() - self._source.y()) * self._scale
            self._offset = min(max(0.0, middle - shown_h / 2), self._pixmap_size().height() - shown_h)
        else:
            self._offset = 0.0
        if not self._dragging and self._left_band(visible):
            self._rerender.start()
        whole = visible.contains(self._whole.adjusted(8, 8, -8, -8))
        self.setVisible(self.wanted and not whole)
        self.update()

    def place(self) -> None:
        vp = self._view.viewport().geometry()
        self.move(vp.right() - self.width() - 12, vp.top() + 12)

    def paintEvent(self, event) -> None:
        if self._pixmap is None:
            return
        p = QPainter(self)
        pal = self.palette()
        bg = QColor(pal.base().color())
        bg.setAlpha(225)
        p.setPen(QPen(pal.mid().color(), 1))
        p.setBrush(bg)
        p.drawRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        inner = QRectF(PAD, PAD, self.width() - 2 * PAD, self.height() - 2 * PAD)
        p.setClipRect(inner)
        p.drawPixmap(QPointF(PAD, PAD - self._offset), self._pixmap)
        r = self._to_map(self._view.visible_scene_rect()).intersected(inner.adjusted(-2, -2, 2, 2))
        accent = QColor(pal.highlight().color())
        p.setPen(QPen(accent, 1.5))
        fill = QColor(accent)
        fill.setAlpha(40)
        p.setBrush(fill)
        p.drawRect(r)
        p.end()

    def _to_map(self, rect: QRectF) -> QRectF:
        s = self._scale
        return QRectF(PAD + (rect.x() - self._source.x()) * s, PAD - self._offset + (rect.y() - self._source.y()) * s,
                      rect.width() * s, rect.height() * s)

    def _to_scene(self, pt: QPointF) -> QPointF:
        s = self._scale
        return QPointF(self._source.x() + (pt.x() - PAD) / s, self._source.y() + (pt.y() - PAD + self._offset) / s)

    def mousePressEvent(self, event) -> None:
        self._dragging = True
        self._view.centerOn(self._to_scene(event.position()))
        self.refresh()

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.LeftButton:
            self._view.centerOn(self._to_scene(event.position()))
            self.refresh()

    def mouseReleaseEvent(self, event) -> None:
        self._dragging = False
        self.refresh()
