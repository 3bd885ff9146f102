"""Images (.svg .png .pdf) of a ``GraphScene``: a header that states what is shown, the
legend, then the graph exactly as the scene draws it (same colours, frames and marks).

Exporting the window's own scene is "what you see is what you export"; ``scene_for``
builds a scene for a graph that is not on screen (the CLI). SVG and PDF are vector (text
stays text). PNG is rasterised at ``scale`` but capped at ``max_pixels`` (100 MP by
default, which common image libraries open): beyond it the picture is scaled down and
the result says so, or, with ``tiles=True``, written at full scale as tiles of at most
``TILE_SIDE`` pixels beside a capped overview. All files of one export are written
together through ``AtomicFiles``: an interrupted export leaves nothing half-written.

Qt is imported inside the functions: importing this module (the export table does) does
not load Qt.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from gradviz.core.runtime.atomic import AtomicFiles, ExportError
from gradviz.core.output.marks import Marks
from gradviz.render.primitives.qtcompat import ensure_app
from gradviz.render.scene.header import header_text

log = logging.getLogger(__name__)

PAD = 24.0
GAP = 16.0                     # legend -> graph
MAX_PNG_PIXELS = 100_000_000   # 100 MP: what common image libraries agree to open
MAX_PNG_SIDE = 32000           # QImage / PNG readers: keep each side below 32k pixels
TILE_SIDE = 8192               # full-resolution tiles: at most 8192 x 8192 pixels each
MAX_PDF_POINTS = 14400.0       # PDF viewers' page limit (200 inches)


@dataclass
class ImageOptions:
    scale: float = 2.0               # PNG pixels per scene pixel
    dpi: float | None = None         # print size metadata (PNG), resolution (PDF)
    theme: str = "light"             # for scenes built here (``scene_for``)
    legend: bool = True
    max_pixels: int = MAX_PNG_PIXELS
    tiles: bool = False              # PNG over the cap: full-scale tiles beside a capped overview
    tile_side: int = TILE_SIDE       # pixels per tile side


@dataclass
class ExportResult:
    path: Path
    files: list[Path] = field(default_factory=list)   # everything written (tiles too)
    pixels: tuple[int, int] | None = None               # PNG size (the overview's, with tiles)
    scale: float | None = None                          # PNG scale used
    note: str = ""                                      # what the user should know (scaled down, tiles)


@dataclass
class Page:
    width: float             # scene pixels
    height: float
    source: object           # QRectF of the scene drawn
    legend_h: float
    title: str | None
    subtitle: str | None
    marks: list[str]
    frames: bool
    fixed: bool


def make_page(scene, region=None, legend: bool = True) -> Page:
    """The page for ``scene``: its whole graph, or ``region`` (a scene QRectF, e.g. the view)."""
    from gradviz.render.export.legend import legend_size

    rect = scene.graph_rect()
    if region is not None:
        rect = rect.intersected(region)
        if rect.isEmpty():
            raise ExportError("the current view shows no part of the graph: scroll to it or export the whole graph")
    state = scene.shown_state("whole graph" if region is None else "current view")
    title, subtitle = header_text(state)
    marks, frames = list(state.marks), bool(scene.frames)
    if legend:
        size = legend_size(title, subtitle, marks, frames, state.fixed_range)
        legend_w, legend_h = size.width(), size.height() + GAP
    else:
        legend_w = legend_h = 0.0
    return Page(max(rect.width(), legend_w) + 2 * PAD, rect.height() + legend_h + 2 * PAD, rect, legend_h,
                title, subtitle, marks, frames, state.fixed_range)


def paint_page(painter, scene, page: Page, legend: bool = True, clip=None, backdrop: bool = True) -> None:
    """Background, header and legend, graph; the painter's unit is one scene pixel.
    ``clip`` (a page QRectF, e.g. one tile) limits the graph drawn to what it covers.
    ``backdrop=False`` paints only the graph's visible items, no background: a later part of
    a streamed SVG (``svg_stream``), drawn over the first."""
    from PySide6.QtCore import QPointF, QRectF, Qt

    from gradviz.render.export.legend import paint_legend

    if backdrop:
        painter.fillRect(QRectF(0, 0, page.width, page.height), scene.theme.color("background"))
    if legend:
        paint_legend(painter, QPointF(PAD, PAD), scene.structure or scene.color_scale(), scene.theme, page.title,
                     page.subtitle, marks=page.marks, frames=page.frames, fixed=page.fixed)
    src = page.source
    target = QRectF(PAD, PAD + page.legend_h, src.width(), src.height())
    if clip is not None:  # the part of the graph under the clip: Qt then draws only the items there
        part = target.intersected(clip.adjusted(-2, -2, 2, 2))
        if part.isEmpty():
            return
        src = part.translated(src.left() - target.left(), src.top() - target.top())
        target = part
    brush = scene.backgroundBrush()
    with scene.exporting():
        if not backdrop:
            scene.setBackgroundBrush(Qt.NoBrush)
        try:
            scene.render(painter, target, src)
        finally:
            if not backdrop:
                scene.setBackgroundBrush(brush)


def scene_for(graph: nx.DiGraph, marks: Marks | None = None, theme: str = "light", layout=None):
    """A scene of ``graph`` not shown anywhere (laid out with measured box sizes), with ``marks``."""
    ensure_app()
    from gradviz.render.primitives.style import layout_graph
    from gradviz.render.scene.scene import GraphScene

    scene = GraphScene(theme=theme)
    scene.set_graph(graph, layout if layout is not None else layout_graph(graph))
    if marks:
        scene.apply_marks(marks.on_view(graph))
    return scene


def png_scale(page: Page, scale: float, max_pixels: int = MAX_PNG_PIXELS) -> float:
    """``scale`` lowered, if needed, so the PNG stays within ``max_pixels`` and the side limit."""
    s = min(scale, MAX_PNG_SIDE / page.width, MAX_PNG_SIDE / page.height)
    if page.width * page.height * s * s > max_pixels:
        s = math.sqrt(max_pixels / (page.width * page.height))
        while round(page.width * s) * round(page.height * s) > max_pixels:  # pixels are whole
            s *= 0.999
    return s


def cap_limit(size: tuple[int, int], max_pixels: int = MAX_PNG_PIXELS) -> str:
    """Which limit a scaled-down PNG of ``size`` pixels met: the side or the pixel count."""
    return f"{MAX_PNG_SIDE:,} pixels a side" if max(size) >= MAX_PNG_SIDE - 1 else f"{max_pixels / 1e6:g} MP"


def page_image(scene, page: Page, scale: float, legend: bool = True, clip=None):
    """The page (or its ``clip``: a QRect in output pixels) as a QImage at ``scale``."""
    from PySide6.QtCore import QRect, QRectF
    from PySide6.QtGui import QImage, QPainter

    full = QRect(0, 0, max(1, round(page.width * scale)), max(1, round(page.height * scale)))
    area = full if clip is None else clip.intersected(full)
    image = QImage(area.width(), area.height(), QImage.Format_ARGB32_Premultiplied)
    if image.isNull():
        raise ExportError(f"not enough memory for a {area.width()}×{area.height()} pixel image")
    image.fill(scene.theme.color("background"))
    painter = QPainter(image)
    try:  # end the painter whatever happens: a QImage freed under an active painter crashes Qt
        painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing | QPainter.SmoothPixmapTransform)
        painter.translate(-area.left(), -area.top())
        painter.scale(scale, scale)
        paint_page(painter, scene, page, legend, None if clip is None else QRectF(
            area.left() / scale, area.top() / scale, area.width() / scale, area.height() / scale))
    finally:
        painter.end()
    return image


def _save_png(image, tmp: str, dpi: float | None) -> None:
    if dpi:
        dots_per_meter = round(dpi / 0.0254)
        image.setDotsPerMeterX(dots_per_meter)
        image.setDotsPerMeterY(dots_per_meter)
    if not image.save(tmp, "PNG"):
        raise ExportError(f"Qt could not write the PNG ({image.width()}×{image.height()} pixels)")


def tile_path(target: Path, row: int, col: int) -> Path:
    return target.with_name(f"{target.stem}.r{row}c{col}{target.suffix}")


def write_png(scene, page: Page, target: Path, opts: ImageOptions) -> ExportResult:
    from PySide6.QtCore import QRect

    s = png_scale(page, opts.scale, opts.max_pixels)
    size = (max(1, round(page.width * s)), max(1, round(page.height * s)))
    result = ExportResult(target, [target], size, s)
    capped = s < opts.scale - 1e-9
    with AtomicFiles() as files:
        _save_png(page_image(scene, page, s, opts.legend), files.temp_for(target), opts.dpi)
        if capped and opts.tiles:
            width, height = round(page.width * opts.scale), round(page.height * opts.scale)
            side = opts.tile_side
            rows, cols = math.ceil(height / side), math.ceil(width / side)
            for r in range(rows):
                for c in range(cols):
                    clip = QRect(c * side, r * side, side, side)
                    path = tile_path(target, r, c)
                    _save_png(page_image(scene, page, opts.scale, opts.legend, clip), files.temp_for(path), opts.dpi)
                    result.files.append(path)
            result.note = (f"{width:,}×{height:,} pixels at {opts.scale:g}× written as {rows * cols} tiles "
                           f"({target.stem}.r<row>c<col>.png, at most {side}×{side} each); "
                           f"{target.name} is the whole picture at {s:.2g}×")
    if capped and not opts.tiles:
        result.note = (f"scaled to {s:.2g}× instead of {opts.scale:g}× ({size[0]:,}×{size[1]:,} pixels) to stay "
                       f"within {cap_limit(size, opts.max_pixels)}; ask for tiles to keep full resolution, "
                       f"or export SVG/PDF (vector)")
    return result


def write_svg(scene, page: Page, target: Path, opts: ImageOptions) -> ExportResult:
    """Streamed in parts (``svg_stream``): memory stays small whatever the graph's size."""
    from gradviz.render.export.svg_stream import stream_svg

    def paint(painter, first: bool, rect) -> None:
        if first:
            paint_page(painter, scene, page, opts.legend)
            return
        # only the part of the page around ``rect``: Qt then looks at the items there, not at all 100k
        page_rect = rect.translated(PAD - page.source.left(), PAD + page.legend_h - page.source.top())
        paint_page(painter, scene, page, False, page_rect.adjusted(-4, -4, 4, 4), backdrop=False)

    with AtomicFiles() as files:
        with open(files.temp_for(target), "wb") as out:
            stream_svg(out, scene, page, paint)
    return ExportResult(target, [target])


def write_pdf(scene, page: Page, target: Path, opts: ImageOptions) -> ExportResult:
    from PySide6.QtCore import QMarginsF, QSizeF
    from PySide6.QtGui import QPageLayout, QPageSize, QPainter, QPdfWriter

    points = 72.0 / 96.0  # one scene pixel = 1/96 inch
    fit = min(1.0, MAX_PDF_POINTS / (page.width * points), MAX_PDF_POINTS / (page.height * points))
    with AtomicFiles() as files:
        writer = QPdfWriter(files.temp_for(target))
        writer.setCreator("gradviz")
        writer.setTitle(page.title or "gradviz graph")
        resolution = int(opts.dpi or 96)
        writer.setResolution(resolution)
        size = QPageSize(QSizeF(page.width * points * fit, page.height * points * fit), QPageSize.Point, "gradviz",
                         QPageSize.ExactMatch)
        writer.setPageLayout(QPageLayout(size, QPageLayout.Portrait, QMarginsF(0, 0, 0, 0)))
        painter = QPainter()
        if not painter.begin(writer):
            raise ExportError("Qt could not start the PDF writer")
        try:
            painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
            painter.scale(fit * resolution / 96.0, fit * resolution / 96.0)
            paint_page(painter, scene, page, opts.legend)
        finally:
            painter.end()
    note = f"page reduced to {fit:.2g}× to stay within PDF's 200-inch page limit" if fit < 1 else ""
    return ExportResult(target, [target], note=note)


def scene_image(scene, scale: float = 1.0, legend: bool = True, region=None):
    """A QImage of the graph (whole, or ``region``) with its header and legend, e.g. for the clipboard."""
    page = make_page(scene, region, legend)
    return page_image(scene, page, png_scale(page, scale), legend)


def copy_to_clipboard(scene, scale: float = 1.0, legend: bool = True) -> None:
    from PySide6.QtGui import QGuiApplication

    QGuiApplication.clipboard().setImage(scene_image(scene, scale, legend))
