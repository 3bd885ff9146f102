"""The zoomable, pannable view of the graph scene.

Wheel zooms around the cursor, dragging pans, arrow keys ask the window to move the
selection (``navigate``), Escape clears it. F, +, −, 1 and Ctrl+0 are the window's View
actions (``app/actions.py``): one owner per shortcut. Tuned for scenes of
ten thousand items: minimal viewport updates, no painter-state saving, no
antialiasing when zoomed far out.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QFrame, QGraphicsView, QLabel


MIN_SCALE = 0.01         # zoom-out floor, lowered for a graph too big to fit at it (min_scale)
MAX_SCALE = 8.0
ANTIALIAS_ABOVE = 0.35   # below this zoom edges are sub-pixel anyway
FIT_MAX_SCALE = 1.25     # Fit never blows a small graph up beyond this


class GraphView(QGraphicsView):
    navigate = Signal(str)          # "up" | "down" | "left" | "right"
    cleared = Signal()              # Escape: clear the selection
    zoomChanged = Signal(float)
    viewportMoved = Signal()

    def __init__(self, scene, parent=None) -> None:
        super().__init__(scene, parent)
        self.setObjectName("graphView")
        self.setFrameShape(QFrame.NoFrame)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.AnchorViewCenter)
        self.setDragMode(QGraphicsView.ScrollHandDrag)
        self.setViewportUpdateMode(QGraphicsView.MinimalViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.DontSavePainterState, True)
        self.setOptimizationFlag(QGraphicsView.DontAdjustForAntialiasing, True)
        self.setCacheMode(QGraphicsView.CacheNone)
        self.setRenderHint(QPainter.Antialiasing, True)
        self.setRenderHint(QPainter.TextAntialiasing, True)
        self.setFocusPolicy(Qt.StrongFocus)
        # an open canvas: the graph can be scrolled half a screen past its edges, so any
        # node can be centred; panning is by dragging (and the overview map)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.bottom_margin = 0   # pixels covered by the legend overlay: Fit keeps the graph above it
        self.fitted = False      # the view is as Fit left it: a resize fits again
        self._own_scroll = 0     # >0 while the view moves itself (fit, resize): not a user pan
        self._placeholder = QLabel(self)
        self._placeholder.setAlignment(Qt.AlignCenter)
        self._placeholder.setWordWrap(True)
        self._placeholder.setObjectName("placeholder")
        self._placeholder.hide()
        self.horizontalScrollBar().valueChanged.connect(lambda _: self.viewportMoved.emit())
        self.verticalScrollBar().valueChanged.connect(lambda _: self.viewportMoved.emit())

    # -- zoom ----------------------------------------------------------------
    def scale_factor(self) -> float:
        return self.transform().m11()

    def set_scale(self, scale: float, anchor: QPointF | None = None) -> None:
        if not self._own_scroll:
            self.fitted = False
        scale = min(max(scale, self.min_scale()), MAX_SCALE)
        factor = scale / self.scale_factor()
        if abs(factor - 1.0) < 1e-9:
            return
        if anchor is not None:
            old = self.transformationAnchor()
            self.setTransformationAnchor(QGraphicsView.NoAnchor)
            scene_pt = self.mapToScene(anchor.toPoint())
            self.scale(factor, factor)
            delta = self.mapFromScene(scene_pt) - anchor.toPoint()
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() + delta.x())
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() + delta.y())
            self.setTransformationAnchor(old)
        else:
            old = self.transformationAnchor()
            self.setTransformationAnchor(QGraphicsView.AnchorViewCenter)
            self.scale(factor, factor)
            self.setTransformationAnchor(old)
        self._update_hints()
        self.update_canvas()
        self.zoomChanged.emit(self.scale_factor())

    def min_scale(self) -> float:
        """How far out the view may zoom: ``MIN_SCALE``, or for a graph too big to fit there (an
        LSTM unrolled over 2,000 steps is 1.8 million pixels tall) half its Fit scale, so Fit
        and zooming out always reach the whole graph."""
        scene = self.scene()
        rect = scene.graph_rect() if scene is not None and hasattr(scene, "graph_rect") else QRectF()
        if rect.isEmpty():
            return MIN_SCALE
        w, h = self.fit_size()
        rect = rect.adjusted(-12, -12, 12, 12)
        return min(MIN_SCALE, 0.5 * min(w / rect.width(), h / rect.height()))

    def zoom_in(self) -> None:
        self.set_scale(self.scale_factor() * 1.25)

    def zoom_out(self) -> None:
        self.set_scale(self.scale_factor() / 1.25)

    def actual_size(self) -> None:
        self.set_scale(1.0)

    def fit(self) -> None:
        """The whole graph in view above the legend, centred (never blown up past
        ``FIT_MAX_SCALE``). The view stays fitted through resizes until the user moves it."""
        self._own_scroll += 1
        try:
            self._fit()
        finally:
            self._own_scroll -= 1
        self.fitted = True

    def fit_size(self) -> tuple[float, float]:
        """The viewport area (w, h) Fit puts the graph in: above the legend."""
        vp = self.viewport().rect()
        return float(vp.width()), float(max(1, vp.height() - self.bottom_margin))

    def _fit(self) -> None:
        rect = self.scene().graph_rect()
        if rect.isEmpty():
            return
        rect = rect.adjusted(-12, -12, 12, 12)
        w, h = self.fit_size()
        scale = min(w / rect.width(), h / rect.height(), FIT_MAX_SCALE)
        self.set_scale(scale)
        self.update_canvas()
        self.centerOn(rect.center() + QPointF(0, self.bottom_margin / (2 * scale)))

    def fit_all(self) -> None:
        scene = self.scene()
        rect = scene.graph_rect()
        if rect.isEmpty():
            return
        vp = self.viewport().rect()
        rect = rect.adjusted(-24, -24, 24, 24)
        self.set_scale(min(vp.width() / rect.width(), vp.height() / rect.height()))
        self.update_canvas()
        self.centerOn(rect.center())

    def update_canvas(self) -> None:
        """Scene rect = the graph plus half a viewport on each side (at the current zoom)."""
        scene = self.scene()
        rect = scene.graph_rect()
        if rect.isEmpty():
            return
        s = self.scale_factor()
        vp = self.viewport().rect()
        px, py = vp.width() / (2 * s), vp.height() / (2 * s)
        target = rect.adjusted(-px, -py, px, py)
        if target != self.sceneRect():
            centre = self.mapToScene(vp.center())
            self.setSceneRect(target)
            self.centerOn(centre)

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        super().scrollContentsBy(dx, dy)
        if not self._own_scroll:
            self.fitted = False    # panned (drag, overview map, centring on a node...)

    def _update_hints(self) -> None:
        far = self.scale_factor() < ANTIALIAS_ABOVE
        self.setRenderHint(QPainter.Antialiasing, not far)

    def wheelEvent(self, event) -> None:
        if event.modifiers() & Qt.ShiftModifier:
            return super().wheelEvent(event)  # shift+wheel scrolls sideways
        delta = event.angleDelta().y() or event.angleDelta().x()
        if not delta:
            return
        factor = 1.0015 ** delta
        self.set_scale(self.scale_factor() * factor, event.position())
        event.accept()

    def keyPressEvent(self, event) -> None:
        keys = {Qt.Key_Up: "up", Qt.Key_Down: "down", Qt.Key_Left: "left", Qt.Key_Right: "right"}
        if event.key() in keys and not event.modifiers() & (Qt.ControlModifier | Qt.AltModifier):
            self.navigate.emit(keys[event.key()])
            event.accept()
            return
        if event.key() == Qt.Key_Escape:
            self.cleared.emit()
            event.accept()
            return
        super().keyPressEvent(event)

    # -- helpers -------------------------------------------------------------
    def center_on_rect(self, rect: QRectF, zoom_in: bool = True) -> None:
        """Centre on ``rect``; zoom in to a readable scale when it is tiny on screen."""
        self.fitted = False
        if zoom_in and self.scale_factor() < 0.5:
            self.set_scale(0.8)
        self.centerOn(rect.center())
        self.viewportMoved.emit()

    def visible_scene_rect(self) -> QRectF:
        return self.mapToScene(self.viewport().rect()).boundingRect()

    def set_placeholder(self, text: str | None) -> None:
        if text:
            self._placeholder.setText(text)
            self._placeholder.show()
            self._placeholder.raise_()
            self._place_placeholder()
        else:
            self._placeholder.hide()

    def _place_placeholder(self) -> None:
        r = self.viewport().geometry()
        self._placeholder.setGeometry(r.adjusted(40, 40, -40, -40))

    def resizeEvent(self, event) -> None:
        self._own_scroll += 1
        try:
            super().resizeEvent(event)
            self.update_canvas()
        finally:
            self._own_scroll -= 1
        self._place_placeholder()
        self.viewportMoved.emit()   # the window places the legend: bottom_margin is current now
        if self.fitted:
            self.fit()
