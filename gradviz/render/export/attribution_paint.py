"""Paints an attribution figure (``core.attribution_figure`` sections) with QPainter.

One painter serves the app's Attribution panel and ``gradviz attribute -o out.png``, so
the file shows what the panel shows. ``paint_figure`` returns hit regions (rectangle,
tooltip text) for the panel's hover.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen

from gradviz.core.attribution.attribute import AttributionResult
from gradviz.core.attribution.figure import (Section, color_limit, diverging_rgb, header, sections,
                                             sequential_rgb)
from gradviz.core.runtime.atomic import ExportError, atomic_write
from gradviz.render.primitives import style
from gradviz.render.primitives.qtcompat import ensure_app

PAD = 16.0
HEADER_H = 50.0
TITLE_H = 24.0
IMAGE_H = 168.0
BARS_H = 150.0
NOTE_H = 26.0
GAP = 14.0


@dataclass
class Hit:
    rect: QRectF
    text: str


def section_height(sec: Section) -> float:
    body = {"image": IMAGE_H, "bars": BARS_H + (16 if sec.labels else 0)}.get(sec.kind, NOTE_H)
    return TITLE_H + body + GAP


def figure_height(result: AttributionResult, example: int | None) -> float:
    return PAD + HEADER_H + sum(section_height(s) for s in sections(result, example)) + PAD


def paint_figure(painter: QPainter, result: AttributionResult, example: int | None, width: float,
                 theme: style.Theme = style.LIGHT) -> list[Hit]:
    painter.setRenderHint(QPainter.Antialiasing, True)
    secs = sections(result, example)
    height = PAD + HEADER_H + sum(section_height(s) for s in secs) + PAD
    painter.fillRect(QRectF(0, 0, width, height), theme.color("background"))
    title, subtitle = header(result)
    text = QColor(theme.strong_outline)
    muted = QColor(theme.muted_text)
    painter.setPen(text)
    painter.setFont(style.font(15, 600))
    painter.drawText(QRectF(PAD, PAD, width - 2 * PAD, 22), Qt.AlignLeft | Qt.AlignVCenter, title)
    bad = result.completeness is not None and not result.completeness.ok
    painter.setPen(QColor(theme.broken) if bad else muted)
    painter.setFont(style.font(11, 400))
    painter.drawText(QRectF(PAD, PAD + 24, width - 2 * PAD, 18), Qt.AlignLeft | Qt.AlignVCenter, subtitle)
    hits: list[Hit] = []
    y = PAD + HEADER_H
    for sec in secs:
        painter.setPen(text)
        painter.setFont(style.font(12, 600))
        painter.drawText(QRectF(PAD, y, width - 2 * PAD, TITLE_H - 4), Qt.AlignLeft | Qt.AlignVCenter, sec.title)
        body = QRectF(PAD, y + TITLE_H, width - 2 * PAD, section_height(sec) - TITLE_H - GAP)
        if sec.kind == "image":
            hits += _paint_image_section(painter, sec, body, muted)
        elif sec.kind == "bars":
            hits += _paint_bars_section(painter, sec, body, theme)
        else:
            painter.setPen(muted)
            painter.setFont(style.font(11, 400))
            painter.drawText(body, Qt.AlignLeft | Qt.AlignVCenter, sec.note)
        y += section_height(sec)
    return hits


# -- images ----------------------------------------------------------------------------------

def _qimage(rgb: np.ndarray) -> QImage:
    rgb = np.ascontiguousarray(rgb.astype(np.uint8))
    h, w = rgb.shape[:2]
    img = QImage(rgb.data, w, h, 3 * w, QImage.Format_RGB888)
    return img.copy()   # own the pixels: the numpy buffer goes away


def _grey_rgb(image: np.ndarray) -> np.ndarray:
    if image.ndim == 3:
        return (image * 255).round().astype(np.uint8)
    g = (image * 255).round().astype(np.uint8)
    return np.stack([g, g, g], axis=-1)


def heat_rgb(heat: np.ndarray, signed: bool) -> np.ndarray:
    lim = color_limit(heat)
    return diverging_rgb(heat, lim) if signed else sequential_rgb(heat, lim)


def _fit(rect: QRectF, h: int, w: int) -> QRectF:
    scale = min(rect.height() / max(h, 1), rect.width() / max(w, 1))
    return QRectF(rect.left(), rect.top(), w * scale, h * scale)


def _paint_map(painter: QPainter, rect: QRectF, base: np.ndarray | None, heat: np.ndarray, signed: bool,
               overlay: bool) -> QRectF:
    """The attribution map, over a greyed copy of the input when ``overlay``; nearest-neighbour pixels."""
    h, w = heat.shape
    target = _fit(rect, h, w)
    colors = heat_rgb(heat, signed).astype(np.float64)
    if overlay and base is not None and base.shape[:2] == heat.shape:
        grey = _grey_rgb(base).astype(np.float64)
        strength = np.clip(np.abs(heat) / max(color_limit(heat), 1e-300), 0, 1)[..., None]
        colors = grey * (1 - 0.85 * strength) * 0.6 + 0.4 * 255 * (1 - strength) + colors * 0.85 * strength
    painter.setRenderHint(QPainter.SmoothPixmapTransform, False)
    painter.drawImage(target, _qimage(np.clip(colors, 0, 255)))
    painter.setPen(QPen(QColor("#9ca3af"), 1))
    painter.setBrush(Qt.NoBrush)
    painter.drawRect(target)
    return target


def _pixel_hits(target: QRectF, heat: np.ndarray, what: str) -> list[Hit]:
    h, w = heat.shape
    if h * w > 4096:
        return [Hit(target, f"{what}: {h}×{w} map, |max| {np.abs(heat).max():.4g}")]
    cw, ch = target.width() / w, target.height() / h
    return [Hit(QRectF(target.left() + c * cw, target.top() + r * ch, cw, ch),
                f"{what} [{r}, {c}]: {heat[r, c]:.4g}") for r in range(h) for c in range(w)]


def _caption(painter: QPainter, rect: QRectF, text: str, color: QColor) -> None:
    painter.setPen(color)
    painter.setFont(style.font(10, 400))
    painter.drawText(QRectF(rect.left(), rect.bottom() + 2, max(rect.width(), 320), 14),
                     Qt.AlignLeft | Qt.AlignTop, text)


def _paint_image_section(painter: QPainter, sec: Section, body: QRectF, muted: QColor) -> list[Hit]:
    area = body.adjusted(0, 0, 0, -16)
    h, w = sec.heat.shape
    side = _fit(QRectF(0, 0, area.width() / 2 - GAP, area.height()), h, w)
    left = QRectF(area.left(), area.top(), side.width(), side.height())
    painter.setRenderHint(QPainter.SmoothPixmapTransform, False)
    painter.drawImage(left, _qimage(_grey_rgb(sec.image)))
    painter.setPen(QPen(QColor("#9ca3af"), 1))
    painter.drawRect(left)
    _caption(painter, left, "input", muted)
    right = QRectF(left.right() + GAP, area.top(), side.width(), side.height())
    target = _paint_map(painter, right, sec.image, sec.heat, sec.signed, overlay=True)
    _caption(painter, target, "attribution over the input (channels summed)", muted)
    _paint_scale(painter, QRectF(target.right() + GAP, target.top(), 12, target.height()), sec.heat, sec.signed,
                 muted)
    return _pixel_hits(target, sec.heat, "attribution")


def _paint_scale(painter: QPainter, rect: QRectF, values: np.ndarray, signed: bool, muted: QColor) -> None:
    lim = color_limit(values)
    ramp = np.linspace(lim, -lim if signed else 0, 64)[:, None]
    painter.drawImage(rect, _qimage(heat_rgb(np.repeat(ramp, 2, axis=1), signed)))
    painter.setPen(muted)
    painter.setFont(style.font(9, 400))
    painter.drawText(QPointF(rect.right() + 4, rect.top() + 8), f"{lim:.3g}")
    painter.drawText(QPointF(rect.right() + 4, rect.bottom()), f"{-lim:.3g}" if signed else "0")


# -- bars ------------------------------------------------------------------------------------

def _paint_bars_section(painter: QPainter, sec: Section, body: QRectF, theme: style.Theme) -> list[Hit]:
    labels_h = 16.0 if sec.labels else 0.0
    chart = QRectF(body.left(), body.top(), body.width(), body.height() - labels_h)
    hits: list[Hit] = []
    if sec.square is not None:
        side = chart.height()
        square = QRectF(chart.right() - side, chart.top(), side, side)
        target = _paint_map(painter, square, sec.image, sec.square, sec.signed, overlay=sec.image is not None)
        n = sec.square.shape[0]
        _caption(painter, target, f"the {n * n} features as {n}×{n}", QColor(theme.muted_text))
        hits += _pixel_hits(target, sec.square, "feature")
        chart.setRight(square.left() - GAP * 2)
    values = sec.bars
    n = values.size
    lim = float(np.nanmax(np.abs(values))) if n else 0.0
    lim = lim if lim > 0 else 1.0
    zero_y = chart.center().y() if sec.signed else chart.bottom()
    half = chart.height() / 2 if sec.signed else chart.height()
    slot = chart.width() / max(n, 1)
    bar_w = max(1.0, slot * 0.8)
    colors = heat_rgb(values, sec.signed)
    painter.setPen(Qt.NoPen)
    for i, v in enumerate(values.tolist()):
        x = chart.left() + i * slot + (slot - bar_w) / 2
        hgt = abs(v) / lim * half
        rect = QRectF(x, zero_y - hgt, bar_w, hgt) if v >= 0 else QRectF(x, zero_y, bar_w, hgt)
        r, g, b = (int(c) for c in colors[i])
        painter.setBrush(QColor(r, g, b) if (r, g, b) != (255, 255, 255) else QColor("#e5e7eb"))
        painter.drawRect(rect)
        hits.append(Hit(QRectF(chart.left() + i * slot, chart.top(), slot, chart.height()), sec.bar_text(i)))
    painter.setPen(QPen(QColor(theme.edge), 1))
    painter.drawLine(QPointF(chart.left(), zero_y), QPointF(chart.right(), zero_y))
    painter.setPen(QColor(theme.muted_text))
    painter.setFont(style.font(9, 400))
    painter.drawText(QPointF(chart.left(), chart.top() + 9), f"{lim:.3g}")
    if sec.labels:
        every = max(1, int(np.ceil(22.0 / slot)))    # labels need ~22 px each
        for i in range(0, n, every):
            painter.drawText(QRectF(chart.left() + i * slot - 10, chart.bottom() + 2, slot + 20, 12),
                             Qt.AlignHCenter | Qt.AlignTop, sec.labels[i])
    return hits


# -- files -----------------------------------------------------------------------------------

def render_image(result: AttributionResult, example: int | None = 0, width: float = 960.0,
                 scale: float = 2.0, theme: str = "light") -> QImage:
    ensure_app()
    height = figure_height(result, example)
    img = QImage(int(width * scale), int(height * scale), QImage.Format_ARGB32)
    img.fill(QColor(style.theme(theme).background))
    painter = QPainter(img)
    try:
        painter.scale(scale, scale)
        paint_figure(painter, result, example, width, style.theme(theme))
    finally:
        painter.end()
    return img


def save_png(result: AttributionResult, path, example: int | None = 0, scale: float = 2.0,
             theme: str = "light") -> None:
    img = render_image(result, example, scale=scale, theme=theme)

    def writer(tmp: str) -> None:
        if not img.save(tmp, "PNG"):
            raise ExportError(f"cannot write {path}: Qt could not encode the PNG")

    atomic_write(path, writer)
