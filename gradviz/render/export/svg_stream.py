"""SVG of a scene written in parts, so a 100k-node graph does not need gigabytes.

``QSvgGenerator`` keeps the whole document body in a QString (two bytes a character) until
``QPainter.end()`` and then converts it in one piece: the 240 MB SVG of an 88k-node graph
peaked at 1.2 GB more than the scene itself. Here the scene's painted items are split
into runs in their paint order; each run is painted by its own generator into a small
buffer whose ``<defs>`` and body are appended to the open file at once. The document is
the same drawing: the first part paints the page (background, header, legend) and the
first run; each later part paints only its run over it, each item exactly once, in the
order Qt would paint them. Ids a part defines (gradients, patterns) get a prefix so
two parts never share one.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import BinaryIO, Callable

log = logging.getLogger(__name__)

PART_BYTES = 32 << 20       # parts of ~32 MB of SVG (~150 MB while painted): few parts, small buffers
# Bytes of SVG an item writes, estimated before painting (measured on GPT-1600: 1.5 kB a node
# with its two lines of text, ~400 B a label, ~37 B a path element).
NODE_BYTES, LABEL_BYTES, PATH_ELEMENT_BYTES, OTHER_BYTES = 1500, 400, 37, 4000

_DEF_ID = re.compile(rb'\bid="([^"]+)"')


def painted_items(scene) -> list:
    """Top-level items that draw something, in paint order (children go with their parent)."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QGraphicsItem

    from gradviz.render.parts.items import NodeItem

    out = []
    for item in scene.items(Qt.AscendingOrder):
        if type(item) is NodeItem:   # a hit area per node: nothing to paint (checked first: 100k of them)
            continue
        if item.flags() & QGraphicsItem.ItemHasNoContents and not item.childItems():
            continue
        # not ``parentItem()``: on a top-level item PySide6 (6.11) then drops the scene's reference
        # to its Python object, and the item (e.g. the FrameItem) is deleted with our list
        if item.topLevelItem() is item and item.isVisible():
            out.append(item)
    return out


@dataclass(frozen=True)
class Piece:
    """An item to paint in one part, or one band of the scene's ``FrameItem`` (all module frames
    in one item, cut into horizontal bands by ``frame_bands``: 75 MB of SVG for a 1,600-block GPT)."""
    item: object
    band: int | None = None

    def weight(self) -> int:
        """About how much SVG the piece writes: parts are cut before painting, to about ``PART_BYTES``."""
        from PySide6.QtGui import QPainterPath

        item = self.item
        if self.band is not None:
            return sum(PATH_ELEMENT_BYTES * (p.fill.elementCount() + p.outline.elementCount())
                       + LABEL_BYTES * len(p.labels) for p in item._bands[self.band])
        if hasattr(item, "indices"):                       # NodeBatch
            return NODE_BYTES * len(item.indices)
        curves = getattr(item, "curves", None)
        if isinstance(curves, QPainterPath):               # EdgeBatch: curves, arrows, shape labels
            return (PATH_ELEMENT_BYTES * (curves.elementCount() + item.arrows.elementCount())
                    + LABEL_BYTES * len(item.labels))
        if curves is not None:                             # LongEdges: one cubic per row
            return 3 * PATH_ELEMENT_BYTES * len(curves)
        return OTHER_BYTES


def banded_frames(item) -> dict | None:
    """The FrameItem's frames by band (``frame_bands.banded``), if it has more than one band."""
    from gradviz.render.parts.frames import FrameItem

    bands = getattr(item, "_bands", None) if isinstance(item, FrameItem) else None
    return bands if isinstance(bands, dict) and len(bands) > 1 else None


def pieces_of(items: list) -> list[Piece]:
    out = []
    for item in items:
        bands = banded_frames(item)
        out += [Piece(item, b) for b in sorted(bands)] if bands else [Piece(item)]
    return out


def runs(pieces: list[Piece]) -> list[list[Piece]]:
    """``pieces`` cut into consecutive runs of about ``PART_BYTES`` of SVG each (at least one run)."""
    out, run, size = [], [], 0
    for item in pieces:
        weight = item.weight()
        if run and size + weight > PART_BYTES:
            out.append(run)
            run, size = [], 0
        run.append(item)
        size += weight
    out.append(run)
    return out


def _part(page, paint: Callable) -> bytes:
    """One generator's whole document, painted by ``paint(painter)``."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    from gradviz.core.runtime.atomic import ExportError

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.WriteOnly)
    gen = QSvgGenerator()
    gen.setOutputDevice(buffer)
    gen.setSize(QSize(round(page.width), round(page.height)))
    gen.setViewBox(QRectF(0, 0, page.width, page.height))
    gen.setResolution(96)
    gen.setTitle(page.title or "gradviz graph")
    gen.setDescription(f"gradviz autograd graph: {page.subtitle or ''}")
    painter = QPainter()
    if not painter.begin(gen):
        raise ExportError("Qt could not start the SVG writer")
    try:
        painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
        paint(painter)
    finally:
        painter.end()
    buffer.close()
    return bytes(data)


def split_part(doc: bytes) -> tuple[int, int]:
    """Where the ``<defs>`` start and the closing ``</svg>`` starts in a generator's document."""
    start, end = doc.find(b"<defs>"), doc.rfind(b"</svg>")
    if start < 0 or end < start:
        raise ValueError("not a document of QSvgGenerator: no <defs> ... </svg>")
    return start, end


def prefix_ids(part: bytes, prefix: bytes) -> bytes:
    """``part`` with each id its ``<defs>`` define (and every reference to it) renamed ``prefix`` + id."""
    defs = part[:part.find(b"</defs>")]
    for name in set(_DEF_ID.findall(defs)):
        # only in attributes: Qt escapes '"' in text, so text never holds '="url(#' or ' id="'
        part = re.sub(rb'( id="|="url\(#|href="#)' + re.escape(name) + rb'(?=[")])', rb"\g<1>" + prefix + name, part)
    return part


def stream_svg(out: BinaryIO, scene, page, paint: Callable) -> int:
    """Write the SVG of ``page`` to ``out``. ``paint(painter, first, rect)`` paints the page with
    whichever of the scene's items are visible: when ``first`` the whole page (background,
    legend), else only the graph within ``rect`` (a scene rectangle around the visible items,
    so Qt looks only there). Returns the number of parts."""
    with scene.exporting():   # the items an export paints (no selection or highlight layer)
        shown = painted_items(scene)
    # a FrameItem paints the frame parts of the bands it holds (``_bands``): each part of the
    # SVG gives it its own bands, each band in exactly one part; all are given back afterwards
    whole = {item: bands for item in shown if (bands := banded_frames(item))}
    for item in shown:
        item.setVisible(False)
    try:
        return _write_parts(out, page, pieces_of(shown), paint, whole)
    finally:
        for item, bands in whole.items():
            item._bands = bands
        for item in shown:
            item.setVisible(True)


def _show(run: list[Piece], whole: dict):
    """Make the run's items visible (a FrameItem with only the run's bands); the scene rectangle
    they draw in (frame labels' plates included: a label is drawn where its plate is exposed)."""
    from PySide6.QtCore import QRectF

    rect, chosen = None, {}
    for piece in run:
        item = piece.item
        box = item.sceneBoundingRect()
        if piece.band is not None:
            parts = chosen.setdefault(item, {})[piece.band] = whole[item][piece.band]
            box = parts[0].bounds
            for part in parts:
                width = item._widths[part.frame]
                for r in [part.bounds] + [QRectF(p.x() - 3, p.y() - 10, width + 6, 13) for p in part.labels]:
                    box = r if box is None else box.united(r)
        item.setVisible(True)
        rect = box if rect is None else rect.united(box)
    for item, bands in chosen.items():
        item._bands = bands
    return rect


def _write_parts(out: BinaryIO, page, pieces: list[Piece], paint: Callable, whole: dict) -> int:
    parts = runs(pieces)
    for k, run in enumerate(parts):
        rect = _show(run, whole)
        try:
            doc = _part(page, lambda painter: paint(painter, k == 0, rect))
        finally:
            for piece in run:
                piece.item.setVisible(False)
        start, end = split_part(doc)
        view = memoryview(doc)
        if k == 0:
            out.write(view[:end])                      # the head, the first <defs> and body
        elif doc.find(b'id="', start, doc.find(b"</defs>")) >= 0:   # ids defined here: make them this part's
            out.write(prefix_ids(doc[start:end], b"p%d-" % k))
        else:
            out.write(view[start:end])
        view.release()
    out.write(b"</svg>\n")
    log.debug("SVG of %d pieces written in %d parts", len(pieces), len(parts))
    return len(parts)
