"""Images of the whole graph (.svg .png .pdf) drawn by ``GraphScene``, legend on top.

The page is: a title line and the colour legend, then the graph at scene scale. SVG
and PDF are vector (text stays text); PNG is rasterised at ``scale`` (or ``dpi``/96).
Files are written through ``atomic_write``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from gradviz.core.export import ExportError, atomic_write
from gradviz.core.layout import Layout
from gradviz.render.qtcompat import ensure_app

PAD = 24.0
GAP = 16.0                     # legend -> graph
MAX_PNG_SIDE = 32000           # QImage / PNG readers: keep each side below 32k pixels
MAX_PNG_PIXELS = 400_000_000   # ~1.6 GB of ARGB32: beyond this we lower the scale
MAX_PDF_POINTS = 14400.0       # PDF viewers' page limit (200 inches)


@dataclass
class Page:
    width: float
    height: float
    legend_h: float
    title: str | None
    subtitle: str | None


def _page(scene, graph: nx.DiGraph | None, legend: bool) -> Page:
    from gradviz.render.legend import legend_size

    title, subtitle = _title(graph) if graph is not None else (None, None)
    rect = scene.graph_rect()
    legend_h = legend_size(title).height() + GAP if legend else 0.0
    legend_w = legend_size(title).width() if legend else 0.0
    return Page(max(rect.width(), legend_w) + 2 * PAD, rect.height() + legend_h + 2 * PAD, legend_h, title, subtitle)


def _title(graph: nx.DiGraph) -> tuple[str | None, str | None]:
    g = graph.graph
    name = os.path.basename(g.get("script") or "") or None
    parts = []
    if g.get("step") is not None:
        parts.append(f"step {g['step']}")
    if isinstance(g.get("loss"), (int, float)):
        parts.append(f"loss {g['loss']:.4g}")
    n = graph.number_of_nodes()
    parts.append(f"{n:,} node{'s' if n != 1 else ''}")
    if g.get("expanded") is not None:
        parts.append("collapsed view")
    return name or "autograd graph", " · ".join(parts)


def paint_page(painter, scene, page: Page, legend: bool = True) -> None:
    """Background, legend and graph; the painter's unit is one scene pixel."""
    from PySide6.QtCore import QPointF, QRectF

    from gradviz.render.legend import paint_legend

    painter.fillRect(QRectF(0, 0, page.width, page.height), scene.theme.color("background"))
    if legend:
        paint_legend(painter, QPointF(PAD, PAD), scene.color_scale(), scene.theme, page.title, page.subtitle)
    rect = scene.graph_rect()
    target = QRectF(PAD, PAD + page.legend_h, rect.width(), rect.height())
    was = scene.force_detail
    scene.force_detail = True  # export shows every label whatever the scale
    try:
        scene.render(painter, target, rect)
    finally:
        scene.force_detail = was


def build_scene(graph: nx.DiGraph, layout: Layout, theme: str = "light"):
    ensure_app()
    from gradviz.render.scene import GraphScene

    scene = GraphScene(theme=theme)
    scene.set_graph(graph, layout)
    return scene


def render_image(graph: nx.DiGraph, layout: Layout, path: str | os.PathLike, scale: float = 2.0,
                 dpi: float | None = None, theme: str = "light", legend: bool = True) -> Path:
    """Draw ``graph`` at ``layout`` to ``path`` (.svg, .png or .pdf) with the legend."""
    scene = build_scene(graph, layout, theme)
    return render_scene(scene, path, scale=scale, dpi=dpi, graph=graph, legend=legend)


def render_scene(scene, path: str | os.PathLike, scale: float = 2.0, dpi: float | None = None,
                 graph: nx.DiGraph | None = None, legend: bool = True) -> Path:
    target = Path(path)
    ext = target.suffix.lower()
    writers = {".png": _write_png, ".svg": _write_svg, ".pdf": _write_pdf}
    if ext not in writers:
        raise ExportError(f"cannot draw an image as '{target.suffix}': use .svg, .png or .pdf")
    page = _page(scene, graph if graph is not None else scene.graph, legend)
    return atomic_write(target, lambda tmp: writers[ext](tmp, scene, page, scale, dpi, legend))


def png_scale(page: Page, scale: float) -> float:
    """``scale`` lowered, if needed, so the PNG stays within the size limits."""
    s = scale
    s = min(s, MAX_PNG_SIDE / page.width, MAX_PNG_SIDE / page.height)
    if page.width * page.height * s * s > MAX_PNG_PIXELS:
        s = (MAX_PNG_PIXELS / (page.width * page.height)) ** 0.5
    return s


def page_image(scene, page: Page, scale: float, legend: bool = True):
    from PySide6.QtGui import QImage, QPainter

    s = png_scale(page, scale)
    image = QImage(max(1, round(page.width * s)), max(1, round(page.height * s)), QImage.Format_ARGB32_Premultiplied)
    image.fill(scene.theme.color("background"))
    painter = QPainter(image)
    painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing | QPainter.SmoothPixmapTransform)
    painter.scale(s, s)
    paint_page(painter, scene, page, legend)
    painter.end()
    return image


def _write_png(tmp: str, scene, page: Page, scale: float, dpi: float | None, legend: bool) -> None:
    image = page_image(scene, page, scale, legend)  # pixels follow scale; dpi is metadata (print size)
    if dpi:
        dots_per_meter = round(dpi / 0.0254)
        image.setDotsPerMeterX(dots_per_meter)
        image.setDotsPerMeterY(dots_per_meter)
    if not image.save(tmp, "PNG"):
        raise ExportError(f"Qt could not write the PNG ({image.width()}×{image.height()} pixels)")


def _write_svg(tmp: str, scene, page: Page, scale: float, dpi: float | None, legend: bool) -> None:
    from PySide6.QtCore import QRectF, QSize
    from PySide6.QtGui import QPainter
    from PySide6.QtSvg import QSvgGenerator

    gen = QSvgGenerator()
    gen.setFileName(tmp)
    gen.setSize(QSize(round(page.width), round(page.height)))
    gen.setViewBox(QRectF(0, 0, page.width, page.height))
    gen.setResolution(96)
    gen.setTitle(page.title or "gradviz graph")
    gen.setDescription(f"gradviz autograd graph {page.subtitle or ''}")
    painter = QPainter()
    if not painter.begin(gen):
        raise ExportError("Qt could not start the SVG writer")
    painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
    paint_page(painter, scene, page, legend)
    painter.end()


def _write_pdf(tmp: str, scene, page: Page, scale: float, dpi: float | None, legend: bool) -> None:
    from PySide6.QtCore import QMarginsF, QSizeF
    from PySide6.QtGui import QPageLayout, QPageSize, QPainter, QPdfWriter

    points = 72.0 / 96.0  # one scene pixel = 1/96 inch
    fit = min(1.0, MAX_PDF_POINTS / (page.width * points), MAX_PDF_POINTS / (page.height * points))
    writer = QPdfWriter(tmp)
    writer.setCreator("gradviz")
    writer.setTitle(page.title or "gradviz graph")
    resolution = int(dpi or 96)
    writer.setResolution(resolution)
    size = QPageSize(QSizeF(page.width * points * fit, page.height * points * fit), QPageSize.Point, "gradviz",
                     QPageSize.ExactMatch)
    writer.setPageLayout(QPageLayout(size, QPageLayout.Portrait, QMarginsF(0, 0, 0, 0)))
    painter = QPainter()
    if not painter.begin(writer):
        raise ExportError("Qt could not start the PDF writer")
    painter.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
    painter.scale(fit * resolution / 96.0, fit * resolution / 96.0)
    paint_page(painter, scene, page, legend)
    painter.end()


def export_image(graph: nx.DiGraph, path: str | os.PathLike, scale: float = 2.0, dpi: float | None = None,
                 theme: str = "light", legend: bool = True) -> Path:
    """Lay out ``graph`` with box sizes that fit its text and draw it to ``path``."""
    ensure_app()
    from gradviz.render.style import layout_graph

    return render_image(graph, layout_graph(graph), path, scale=scale, dpi=dpi, theme=theme, legend=legend)


def scene_image(scene, scale: float = 1.0, legend: bool = True):
    """A QImage of the whole graph (and legend), e.g. for the clipboard."""
    return page_image(scene, _page(scene, scene.graph, legend), scale, legend)


def copy_to_clipboard(scene, scale: float = 1.0, legend: bool = True) -> None:
    from PySide6.QtGui import QGuiApplication

    QGuiApplication.clipboard().setImage(scene_image(scene, scale, legend))
