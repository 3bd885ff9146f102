"""An overview of the whole graph in a corner of the view, with the visible area
drawn; click or drag on it to move there.

It paints a pixmap rendered once from the scene (re-rendered, debounced, when the
scene changes) instead of being a second live ``QGraphicsView``: re-drawing ten
thousand items on every scroll would double the cost of panning.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QWidget

MAX_SIDE = 170


class Minimap(QWidget):
    def __init__(self, view) -> None:
        super().__init__(view)
        self._view = view
        self._pixmap: QPixmap | None = None
        self._source = QRectF()
        self._target = QRectF()
        self.setObjectName("minimap")
        self.setCursor(Qt.PointingHandCursor)
        self.setToolTip("Overview: click or drag to move the view")
        self._rerender = QTimer(self, singleShot=True, interval=400, timeout=self.render_scene)
        view.scene().changed.connect(lambda _: self._rerender.start())
        view.viewportMoved.connect(self.refresh)
        view.zoomChanged.connect(lambda _: self.refresh())
        self.wanted = True   # the user's View ▸ Overview map choice
        self.hide()

    def render_scene(self) -> None:
        scene = self._view.scene()
        rect = scene.graph_rect()
        if rect.isEmpty():
            self._pixmap = None
            self.hide()
            return
        rect = rect.adjusted(-10, -10, 10, 10)
        scale = min(MAX_SIDE / rect.width(), MAX_SIDE / rect.height())
        size = QSize(max(int(rect.width() * scale), 24), max(int(rect.height() * scale), 24))
        pm = QPixmap(size * self.devicePixelRatioF())
        pm.setDevicePixelRatio(self.devicePixelRatioF())
        pm.fill(Qt.transparent)
        painter = QPainter(pm)
        painter.setRenderHint(QPainter.Antialiasing, True)
        scene.render(painter, QRectF(0, 0, size.width(), size.height()), rect, Qt.KeepAspectRatio)
        painter.end()
        self._pixmap = pm
        self._source = rect
        self._target = QRectF(0, 0, size.width(), size.height())
        self.resize(size.width() + 8, size.height() + 8)
        self.place()
        self.refresh()

    def refresh(self) -> None:
        """Shown only when it helps: part of the graph is out of view."""
        if self._pixmap is None:
            return
        visible = self._view.visible_scene_rect()
        whole = visible.contains(self._source.adjusted(8, 8, -8, -8))
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
        p.drawPixmap(QPointF(4, 4), self._pixmap)
        visible = self._view.visible_scene_rect()
        r = self._to_map(visible).intersected(self._target.translated(4, 4).adjusted(-2, -2, 2, 2))
        accent = QColor(pal.highlight().color())
        p.setPen(QPen(accent, 1.5))
        fill = QColor(accent)
        fill.setAlpha(40)
        p.setBrush(fill)
        p.drawRect(r)
        p.end()

    def _to_map(self, rect: QRectF) -> QRectF:
        s = self._target.width() / self._source.width()
        return QRectF(4 + (rect.x() - self._source.x()) * s, 4 + (rect.y() - self._source.y()) * s,
                      rect.width() * s, rect.height() * s)

    def _to_scene(self, pt: QPointF) -> QPointF:
        s = self._source.width() / self._target.width()
        return QPointF(self._source.x() + (pt.x() - 4) * s, self._source.y() + (pt.y() - 4) * s)

    def mousePressEvent(self, event) -> None:
        self._view.centerOn(self._to_scene(event.position()))
        self.update()

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.LeftButton:
            self._view.centerOn(self._to_scene(event.position()))
            self.update()
