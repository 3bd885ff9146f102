"""Module frames cut into horizontal bands, so a frame as tall as the graph (a module of an
RNN cell unrolled over 2,000 steps: 2,000 strips, 1.8 million pixels) paints only the band
that is on screen. The cut is exact: each rectangle of a frame's area is clipped to the band
(no overlap between bands, so the translucent fill is laid once everywhere) and each outline
segment is split at band edges."""
from __future__ import annotations

from typing import NamedTuple, Protocol

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QPainterPath

BAND = 2048.0   # scene px


class Outlined(Protocol):
    """What ``banded`` reads of a frame (``frames.Frame``, which is built from this module's paths)."""
    rects: list[tuple[float, float, float, float]]      # its area's rectangles
    segments: list[tuple[float, float, float, float]]   # its outline's lines
    pieces: list[QRectF]

    @property
    def label_at(self) -> list[QPointF]: ...


class BandPart(NamedTuple):
    """What one frame draws in one band."""
    frame: int                  # index in the scene's frames (paint order)
    fill: QPainterPath
    outline: QPainterPath
    bounds: QRectF
    labels: list[QPointF]       # label baselines whose plate starts in this band
    pieces: list[QRectF]        # the frame's pieces whose top is in this band (far labels)


def area_path(rects: list[tuple[float, float, float, float]]) -> QPainterPath:
    """A winding-fill path of rectangles (left, top, right, bottom)."""
    path = QPainterPath()
    path.setFillRule(Qt.WindingFill)
    for x0, y0, x1, y1 in rects:
        path.addRect(QRectF(QPointF(x0, y0), QPointF(x1, y1)))
    return path


def lines_path(segments: list[tuple[float, float, float, float]]) -> QPainterPath:
    path = QPainterPath()
    for x0, y0, x1, y1 in segments:
        path.moveTo(x0, y0)
        path.lineTo(x1, y1)
    return path


def _band(y: float) -> int:
    return int(y // BAND)


def _split(rows: list[tuple[float, float, float, float]], out: dict[int, list], slot: int) -> None:
    """Clip each (x0, y0, x1, y1) with y0 <= y1 to the bands it crosses, into ``out[band][slot]``."""
    for x0, y0, x1, y1 in rows:
        top, bottom = min(y0, y1), max(y0, y1)
        for b in range(_band(top), _band(bottom) + 1):
            lo, hi = max(top, b * BAND), min(bottom, (b + 1) * BAND)
            if hi > lo or top == bottom:
                out.setdefault(b, ([], []))[slot].append((x0, lo, x1, hi))
            if top == bottom:
                break


def banded(frames: list[Outlined]) -> dict[int, list[BandPart]]:
    """Band index -> what each frame draws there (frames in paint order)."""
    out: dict[int, list[BandPart]] = {}
    for k, frame in enumerate(frames):
        cut: dict[int, tuple[list, list]] = {}
        _split(frame.rects, cut, 0)
        _split(frame.segments, cut, 1)
        labels: dict[int, list[QPointF]] = {}
        pieces: dict[int, list[QRectF]] = {}
        for piece, point in zip(frame.pieces, frame.label_at):
            labels.setdefault(_band(point.y() - 10), []).append(point)
            pieces.setdefault(_band(piece.top()), []).append(piece)
        for b in sorted(set(cut) | set(labels) | set(pieces)):
            rects, segments = cut.get(b, ([], []))
            fill, outline = area_path(rects), lines_path(segments)
            bounds = fill.boundingRect().united(outline.boundingRect())
            out.setdefault(b, []).append(BandPart(k, fill, outline, bounds, labels.get(b, []), pieces.get(b, [])))
    return out
