"""How a fold box ("Block × 200", ``core/layout/folding.py``) is drawn: a group box on a stack of
cards, its repeats' paths and node count, and a sparkline of each repeat's gradient norm.

The sparkline is on a log scale (gradient norms span decades), left = first repeat in
forward order; a repeat without a gradient leaves a gap, a NaN/Inf one a red tick. Its
lowest and highest norm are written at its ends, so vanishing or exploding depth reads in
one glance, and the same box reads the same in the window and in exported images.
"""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen

from gradviz.core.runtime.formatting import number

FOLD_H = 86.0           # header band, a text line, the sparkline
FOLD_MIN_W = 230.0
STACK_STEP = 4.0        # offset of each card behind the box
STACK_CARDS = 2
SPARK_H = 24.0
BAD = QColor("#dc2626")


def fold_lines(attrs: dict) -> tuple[str, str]:
    """(title, subtitle): 'Block × 200', 'blocks.0 … blocks.199 · 1.2M params · grad 0.031' (what is
    inside: ``core/layout/box_facts.py``; a fold of parameter-free blocks gives its node count)."""
    n = attrs.get("n_nodes", 0)
    span = f"{attrs.get('first', '')} … {attrs.get('last', '')}"
    facts = attrs.get("facts") or f"{number(n, grouped=True)} node{'s' if n != 1 else ''}"
    return str(attrs.get("label") or ""), f"{span} · {facts}"


def fold_size(attrs: dict, text_width) -> tuple[float, float]:
    """Box size: room for both lines (``text_width(text, px, weight)``) and the card stack."""
    primary, secondary = fold_lines(attrs)
    w = max(text_width(primary, 12, 600) + 40, text_width(secondary, 10, 400) + 28, FOLD_MIN_W)
    return float(math.ceil(w + STACK_CARDS * STACK_STEP)), FOLD_H


def card_rect(rect: QRectF) -> QRectF:
    """The front card: the box minus the room the stack behind it takes."""
    d = STACK_CARDS * STACK_STEP
    return rect.adjusted(0, d, -d, 0)


def paint_stack(painter: QPainter, rect: QRectF, pen: QPen, fill: QColor) -> None:
    """The cards behind the front one, up and to the right, lighter the further back."""
    front = card_rect(rect)
    for k in range(STACK_CARDS, 0, -1):
        card = front.translated(k * STACK_STEP, -k * STACK_STEP)
        c = QColor(fill)
        c.setAlphaF(max(0.25, fill.alphaF() * (1.0 - 0.3 * k)))
        painter.setPen(pen)
        painter.setBrush(c)
        painter.drawRoundedRect(card.adjusted(0, 6, 0, 0), 4, 4)


def spark_rect(body: QRectF) -> QRectF:
    return QRectF(body.left() + 10, body.bottom() - SPARK_H - 5, body.width() - 20, SPARK_H)


def sparkline_ends(values: list) -> tuple[str, str]:
    """The sparkline's two labels: where the run starts and "→ where it ends" (a falling
    3134 → 2334 reads so), not its minimum and maximum."""
    ends = [v for v in values if v is not None and math.isfinite(v)]
    if not ends:
        return "", ""
    return number(ends[0], compact=True), "→ " + number(ends[-1], compact=True)


def paint_sparkline(painter: QPainter, area: QRectF, values: list, color: QColor, font) -> None:
    """Log-scale line of ``values`` in ``area``; the first value written at its left end, "→ last" at its right."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    painter.setFont(font)
    if not finite:
        painter.setPen(color)
        text = "no gradient values" if all(v is None for v in values) else "norms: 0"
        painter.drawText(area, Qt.AlignCenter, text)
        return
    lo_text, hi_text = sparkline_ends(values)
    metrics = painter.fontMetrics()
    left_w = metrics.horizontalAdvance(lo_text) + 6
    right_w = metrics.horizontalAdvance(hi_text) + 6
    plot = area.adjusted(left_w, 3, -right_w, -3)
    lo, hi = math.log10(min(finite)), math.log10(max(finite))
    span = hi - lo or 1.0
    n = len(values)

    def point(i: int, v: float) -> QPointF:
        x = plot.left() + (plot.width() * i / (n - 1) if n > 1 else plot.width() / 2)
        y = plot.bottom() - (math.log10(v) - lo) / span * plot.height() if hi > lo else plot.center().y()
        return QPointF(x, y)

    path = QPainterPath()
    pen_down = False
    bad: list[float] = []
    for i, v in enumerate(values):
        if v is None or (math.isfinite(v) and v <= 0):
            pen_down = False
            continue
        if not math.isfinite(v):
            bad.append(point(i, finite[0]).x())
            pen_down = False
            continue
        p = point(i, v)
        if pen_down:
            path.lineTo(p)
        else:
            path.moveTo(p)
            pen_down = True
    painter.setBrush(Qt.NoBrush)
    painter.setPen(QPen(color, 1.4))
    painter.drawPath(path)
    painter.setPen(QPen(BAD, 2.0))
    for x in bad:
        painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
    painter.setPen(color)
    painter.drawText(QRectF(area.left(), area.top(), left_w, area.height()), Qt.AlignVCenter | Qt.AlignLeft, lo_text)
    painter.drawText(QRectF(area.right() - right_w, area.top(), right_w, area.height()),
                     Qt.AlignVCenter | Qt.AlignRight, hi_text)
