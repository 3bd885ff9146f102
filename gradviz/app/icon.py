"""The application icon, drawn in code: three graph nodes in the gradient colours."""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap


def _draw(size: int) -> QPixmap:
    pm = QPixmap(size, size)
    pm.fill(Qt.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.Antialiasing)
    s = size / 64.0
    p.setPen(Qt.NoPen)
    p.setBrush(QColor("#1f2433"))
    p.drawRoundedRect(QRectF(2 * s, 2 * s, 60 * s, 60 * s), 12 * s, 12 * s)
    edge = QPen(QColor("#c8cde0"), 3.2 * s)
    edge.setCapStyle(Qt.RoundCap)
    p.setPen(edge)
    a, b, c = QPointF(19 * s, 18 * s), QPointF(45 * s, 18 * s), QPointF(32 * s, 46 * s)
    p.drawLine(a, c)
    p.drawLine(b, c)
    p.setPen(Qt.NoPen)
    for centre, colour in ((a, "#4a2d7f"), (b, "#2a7fa8"), (c, "#f2e24a")):
        p.setBrush(QColor(colour))
        w, h = 18 * s, 11 * s
        p.drawRoundedRect(QRectF(centre.x() - w / 2, centre.y() - h / 2, w, h), 3 * s, 3 * s)
    p.end()
    return pm


def app_icon() -> QIcon:
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        icon.addPixmap(_draw(size))
    return icon
