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
FRAMES_PER_ITEM = 256       # module frames painted by one item (the scene has one item for all)
# Bytes of SVG an item writes, estimated before painting (measured on GPT-1600: 1.5 kB a node
# with its two lines of text, 4 kB a module frame with its label, ~37 B a path element).
NODE_BYTES, FRAME_BYTES, PATH_ELEMENT_BYTES, OTHER_BYTES = 1500, 4000, 37, 4000

_DEF_ID = re.compile(rb'\bid="([^"]+)"')


def painted_items(scene) -> list:
    """Top-level items that draw something, in paint order (children go with their parent)."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QGraphicsItem

    from gradviz.render.items import NodeItem

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
    """An item to paint in one part, or for the scene's ``FrameItem`` (all module frames in one
    item: 75 MB of SVG for a 1,600-block GPT) its frames ``lo:hi``."""
    item: object
    lo: int = 0
    hi: int | None = None

    def weight(self) -> int:
        """About how much SVG the piece writes: parts are cut before painting, to about ``PART_BYTES``."""
        item = self.item
        if self.hi is not None:                            # module frames
            return FRAME_BYTES * (self.hi - self.lo)
        if hasattr(item, "indices"):                       # NodeBatch
            return NODE_BYTES * len(item.indices)
        if hasattr(item, "curves"):                        # EdgeBatch: curves, arrows, shape labels
            return (PATH_ELEMENT_BYTES * (item.curves.elementCount() + item.arrows.elementCount())
                    + 300 * len(item.labels))
        return OTHER_BYTES


def pieces_of(items: list) -> list[Piece]:
    from gradviz.render.frames import FrameItem

    out = []
    for item in items:
        if isinstance(item, FrameItem) and len(item.frames) > FRAMES_PER_ITEM:
            out += [Piece(item, k, min(k + FRAMES_PER_ITEM, len(item.frames)))
                    for k in range(0, len(item.frames), FRAMES_PER_ITEM)]
        else:
            out.append(Piece(item))
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

    from gradviz.core.atomic import ExportError

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
    whole = {item: item.frames for item in shown if hasattr(item, "frames")}
    for item in shown:
        item.setVisible(False)
    try:
        return _write_parts(out, page, pieces_of(shown), paint, whole)
    finally:
        for item, frames in whole.items():
            item.frames = frames
        for item in shown:
            item.setVisible(True)


def _show(run: list[Piece], whole: dict):
    """Make the run's items visible (a FrameItem with only the run's frames); the scene rectangle they cover."""
    rect, chosen = None, {}
    for piece in run:
        if piece.hi is None:
            box = piece.item.sceneBoundingRect()
        else:
            frames = whole[piece.item][piece.lo:piece.hi]
            chosen.setdefault(piece.item, []).extend(frames)
            box = frames[0].path.boundingRect()
            for frame in frames[1:]:
                box = box.united(frame.path.boundingRect())
        piece.item.setVisible(True)
        rect = box if rect is None else rect.united(box)
    for item, frames in chosen.items():
        item.frames = frames
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
