"""How one node box is painted, per kind. Kinds differ by shape and outline so the
graph reads without colour (the fill is taken by the gradient colour):

    op      rectangle, thin outline, label
    param   rounded rectangle, thick outline, name + shape
    input   stadium (pill), name + shape          leaf: same, dotted outline
    loss    octagon with a double outline, "loss" + value
    group   box with a folder tab: module path, type and node count
Parameters no gradient reached (``reachable=False``) get a grey dashed outline.
"""
from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen, QPolygonF

from gradviz.render.parts.scene_reads import NodeTable
from gradviz.render.primitives import style
from gradviz.render.primitives.fold_paint import card_rect, paint_sparkline, paint_stack, spark_rect
from gradviz.render.primitives.paint_stats import PAINT_STATS


def octagon(rect: QRectF, cut: float) -> QPolygonF:
    x0, y0, x1, y1 = rect.left(), rect.top(), rect.right(), rect.bottom()
    c = min(cut, rect.height() / 2, rect.width() / 2)
    return QPolygonF([QPointF(x0 + c, y0), QPointF(x1 - c, y0), QPointF(x1, y0 + c), QPointF(x1, y1 - c),
                      QPointF(x1 - c, y1), QPointF(x0 + c, y1), QPointF(x0, y1 - c), QPointF(x0, y0 + c)])


def folder_path(rect: QRectF, tab_w: float, tab_h: float, radius: float = 4.0) -> QPainterPath:
    """A box whose top-left carries a raised tab, like a folder icon."""
    p = QPainterPath()
    x0, y0, x1, y1 = rect.left(), rect.top() + tab_h, rect.right(), rect.bottom()
    p.moveTo(x0, y1 - radius)
    p.lineTo(x0, rect.top() + radius)
    p.quadTo(x0, rect.top(), x0 + radius, rect.top())
    p.lineTo(x0 + tab_w - tab_h, rect.top())
    p.lineTo(x0 + tab_w, y0)
    p.lineTo(x1 - radius, y0)
    p.quadTo(x1, y0, x1, y0 + radius)
    p.lineTo(x1, y1 - radius)
    p.quadTo(x1, y1, x1 - radius, y1)
    p.lineTo(x0 + radius, y1)
    p.quadTo(x0, y1, x0, y1 - radius)
    p.closeSubpath()
    return p


class NodePainter:
    """Paints node ``i`` of a scene; the scene keeps geometry, colours and text in lists."""

    def __init__(self, scene: NodeTable) -> None:
        self.sc = scene

    # -- outline ------------------------------------------------------------------------
    def pen(self, i: int) -> QPen:
        sc = self.sc
        if i in sc.selected:
            return sc.pens["selected"]
        if sc.hl_nodes and i in sc.hl_nodes:
            return sc.pens["highlight"]
        if not sc.reachable[i]:
            return sc.pens["unreachable"]
        kind = sc.kinds[i]
        if kind == "param":
            return sc.pens["param"]
        if kind == "leaf":
            return sc.pens["leaf"]
        if kind in ("loss", "group"):
            return sc.pens["strong"]
        return sc.pens["op"]

    # -- body ---------------------------------------------------------------------------
    def paint(self, painter: QPainter, i: int, with_text: bool) -> None:
        sc = self.sc
        rect = sc.rects[i]
        kind = sc.kinds[i]
        painter.setPen(self.pen(i))
        painter.setBrush(sc.fill_colors[i])
        if kind == "param":
            painter.drawRoundedRect(rect, 8, 8)
        elif kind in ("input", "leaf"):
            r = rect.height() / 2
            painter.drawRoundedRect(rect, r, r)
        elif kind == "loss":
            painter.drawPolygon(octagon(rect, 11))
            painter.setBrush(Qt.NoBrush)
            painter.drawPolygon(octagon(rect.adjusted(3.5, 3.5, -3.5, -3.5), 9.5))
        elif kind == "group":
            self._paint_group(painter, i, rect, with_text)
            return
        else:
            painter.drawRoundedRect(rect, 3, 3)
        if with_text:
            self._paint_text(painter, i, rect)

    def _paint_text(self, painter: QPainter, i: int, rect: QRectF) -> None:
        sc = self.sc
        primary, secondary = sc.text_lines(i)
        painter.setPen(sc.text_colors[i])
        PAINT_STATS["node_text"] += 1
        if not secondary:
            painter.setFont(sc.fonts["label"])
            painter.drawText(rect, Qt.AlignCenter, primary)
            return
        mid = rect.center().y()
        top = QRectF(rect.left(), mid - 16, rect.width(), 17)
        bottom = QRectF(rect.left(), mid + 1, rect.width(), 14)
        painter.setFont(sc.fonts["label"])
        painter.drawText(top, Qt.AlignHCenter | Qt.AlignBottom, primary)
        painter.setFont(sc.fonts["small"])
        painter.setPen(sc.secondary_colors[i])
        painter.drawText(bottom, Qt.AlignHCenter | Qt.AlignTop, secondary)

    def _paint_group(self, painter: QPainter, i: int, rect: QRectF, with_text: bool) -> None:
        sc = self.sc
        header_h = style.GROUP_HEADER_H
        fold = sc.graph.nodes[sc.keys[i]] if sc.graph is not None else {}
        if fold.get("fold"):   # a fold box: a stack of cards, the front one drawn as a group
            paint_stack(painter, rect, painter.pen(), sc.fill_colors[i])
            painter.setPen(self.pen(i))
            painter.setBrush(sc.fill_colors[i])
            rect = card_rect(rect)
        tab_w = min(rect.width() * 0.45, 64.0)
        body = rect.adjusted(0, 6, 0, 0)  # the tab pokes up 6 px above the body
        painter.drawPath(folder_path(body, tab_w, 6))
        # header band: the fill darkened a little, so it reads as a title bar on any colour
        band = QRectF(body.left() + 1, body.top() + 6.5, body.width() - 2, header_h)
        painter.setPen(Qt.NoPen)
        painter.setBrush(sc.header_colors[i])
        painter.drawRect(band)
        if not with_text:
            return
        primary, secondary = sc.text_lines(i)
        PAINT_STATS["node_text"] += 1
        painter.setPen(sc.text_colors[i])
        painter.setFont(sc.fonts["header"])
        painter.drawText(band.adjusted(style.PAD_X - 4, 0, -6, 0), Qt.AlignVCenter | Qt.AlignLeft, primary)
        painter.setFont(sc.fonts["small"])
        painter.setPen(sc.secondary_colors[i])
        if fold.get("fold"):
            lower = QRectF(body.left(), band.bottom() + 2, body.width(), 16)
            painter.drawText(lower.adjusted(style.PAD_X - 4, 0, -6, 0), Qt.AlignVCenter | Qt.AlignLeft, secondary)
            paint_sparkline(painter, spark_rect(body), fold.get("repeat_norms") or [], sc.text_colors[i],
                            sc.fonts["small"])
            return
        lower = QRectF(body.left(), band.bottom(), body.width(), body.bottom() - band.bottom())
        painter.drawText(lower.adjusted(style.PAD_X - 4, 0, -6, 0), Qt.AlignVCenter | Qt.AlignLeft, secondary)


def elided_lines(rect: QRectF, kind: str, primary: str, secondary: str) -> tuple[str, str]:
    """A node's two lines elided to the width of its box."""
    inner = rect.width() - 2 * (style.PAD_X - 4 if kind == "group" else style.PAD_X / 2)
    weight = 600 if kind == "group" else 500
    px = style.LABEL_PX - 1 if kind == "group" else style.LABEL_PX
    mode = Qt.ElideLeft if kind == "param" else Qt.ElideRight  # keep ".weight" visible
    return (style.elide(primary, inner, px, weight, mode),
            style.elide(secondary, inner, style.SMALL_PX, 400) if secondary else "")


def darker(color: QColor, amount: float) -> QColor:
    """``color`` mixed toward black by ``amount`` (0..1), keeping alpha."""
    k = 1.0 - amount
    return QColor(int(color.red() * k), int(color.green() * k), int(color.blue() * k), color.alpha())


def secondary_text(text_color: QColor) -> QColor:
    """The secondary line: the text colour at 75 % so it recedes but stays legible."""
    c = QColor(text_color)
    c.setAlphaF(0.78)
    return c


