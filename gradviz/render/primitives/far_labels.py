"""Labels that stay readable when zoomed out (Fit on a big graph): the names of collapsed
module boxes and of module frames, drawn at a fixed screen size instead of vanishing with
the rest of the text. A label may run a little past its box (on a plate) and is elided
beyond that; a box too small on screen gets none."""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter

from gradviz.render.primitives import style
from gradviz.render.primitives.paint_stats import PAINT_STATS

SCREEN_PX = 11          # label height on screen, whatever the zoom
MIN_SCREEN_W = 12.0     # boxes narrower than this on screen get no label
OVERFLOW = 2.5          # a label may run past its box's right edge, up to this many box widths


def paint_far_label(painter: QPainter, rect: QRectF, text: str, lod: float, color: QColor,
                    plate: QColor | None = None, weight: int = 600, overflow: float = OVERFLOW) -> bool:
    """Draw ``text`` at ``rect``'s top-left, ``SCREEN_PX`` pixels tall on screen, on a plate
    when the label runs past the box; False if the box is too small on screen for a label."""
    box_w = rect.width() * lod
    if box_w < MIN_SCREEN_W or not text:
        return False
    shown = style.elide(text, box_w * overflow - 8, SCREEN_PX, weight)
    if not shown or shown.startswith("…") or len(shown) < min(4, len(text)):
        return False
    painter.save()
    painter.translate(rect.left(), rect.top())
    painter.scale(1.0 / lod, 1.0 / lod)            # from here on, one unit is one screen pixel
    width = style.text_width(shown, SCREEN_PX, weight)
    box = QRectF(3, 2, width + 4, SCREEN_PX + 3)
    if plate is not None or width + 8 > box_w:     # past the box: a plate keeps it legible over anything
        painter.fillRect(box, plate if plate is not None else _plate_for(color))
    painter.setPen(color)
    painter.setFont(style.font(SCREEN_PX, weight))
    painter.drawText(box.adjusted(2, 0, 0, 0), Qt.AlignLeft | Qt.AlignVCenter, shown)
    painter.restore()
    PAINT_STATS["far_labels"] = PAINT_STATS.get("far_labels", 0) + 1
    return True


def _plate_for(text: QColor) -> QColor:
    """A plate the text reads on: white under dark text, near-black under light text."""
    plate = QColor("#ffffff") if text.lightness() < 128 else QColor("#111827")
    plate.setAlphaF(0.85)
    return plate
