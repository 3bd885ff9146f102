"""The attribution figure as a widget: the same painter as ``gradviz attribute -o out.png``,
with a tooltip per pixel, bar or token under the pointer."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from gradviz.core.attribution.attribute import AttributionResult
from gradviz.render.primitives import style
from gradviz.render.export.attribution_paint import Hit, figure_height, paint_figure

MIN_W = 560


class FigureWidget(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: AttributionResult | None = None
        self.example: int | None = 0
        self.hits: list[Hit] = []
        self.theme = style.LIGHT
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)

    def show_result(self, result: AttributionResult | None, example: int | None) -> None:
        self.result, self.example, self.hits = result, example, []
        self.setFixedHeight(int(figure_height(result, example)) if result is not None else 0)
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(max(MIN_W, self.width()), self.height())

    def paintEvent(self, event) -> None:
        if self.result is None:
            return
        painter = QPainter(self)
        try:
            self.hits = paint_figure(painter, self.result, self.example, float(max(self.width(), MIN_W)),
                                     self.theme)
        finally:
            painter.end()

    def hit_at(self, x: float, y: float) -> Hit | None:
        for hit in self.hits:
            if hit.rect.contains(x, y):
                return hit
        return None

    def event(self, event) -> bool:
        if event.type() == QEvent.ToolTip:
            hit = self.hit_at(event.pos().x(), event.pos().y())
            if hit is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), hit.text, self)
            return True
        return super().event(event)
