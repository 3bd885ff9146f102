"""The export table: one entry per file extension. A new format is one new entry.

Data formats (.json .graphml .dot) are written from the graph by ``gradviz.core.output.export``
without Qt; images (.svg .png .pdf) are drawn from a ``GraphScene`` by
``gradviz.render.export.image_export``, which loads Qt only when it draws. ``export_graph`` is
the headless path (the CLI: a graph, perhaps collapsed, with diagnosis marks);
``export_scene`` is the window's (exactly what its scene shows, whole or the part in view);
``render_image`` draws a graph at a given layout (tests, benchmarks).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import networkx as nx

from gradviz.core.output import export as data
from gradviz.core.runtime.atomic import ExportError
from gradviz.core.output.marks import Marks
from gradviz.render.export import image_export as image
from gradviz.render.export.image_export import ExportResult, ImageOptions

log = logging.getLogger(__name__)

__all__ = ["Format", "FORMATS", "IMAGE_FORMATS", "check_target", "export_graph", "export_scene", "render_image",
           "ExportResult", "ImageOptions", "ExportError"]


@dataclass(frozen=True)
class Format:
    ext: str
    label: str              # what a file dialog calls it
    image: bool             # drawn from a scene (True) or written from the graph (False)
    write: Callable         # data: write(graph, path); image: write(scene, page, path, ImageOptions) -> ExportResult


FORMATS: dict[str, Format] = {f.ext: f for f in (
    Format(".json", "JSON node-link data", False, data.write_json),
    Format(".graphml", "GraphML data", False, data.write_graphml),
    Format(".dot", "Graphviz DOT", False, data.write_dot),
    Format(".gv", "Graphviz DOT", False, data.write_dot),
    Format(".svg", "SVG vector image", True, image.write_svg),
    Format(".png", "PNG image", True, image.write_png),
    Format(".pdf", "PDF document", True, image.write_pdf),
)}
IMAGE_FORMATS = tuple(ext for ext, f in FORMATS.items() if f.image)


def check_target(path: str | os.PathLike, images_only: bool = False) -> tuple[Path, Format]:
    """The format for ``path``'s extension, after checking the folder can be written."""
    target = Path(path)
    known = IMAGE_FORMATS if images_only else tuple(FORMATS)
    fmt = FORMATS.get(target.suffix.lower())
    if fmt is None or fmt.ext not in known:
        raise ExportError(f"cannot export to '{target.name}': unknown extension '{target.suffix or '(none)'}' "
                          f"(use one of {' '.join(known)})")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ExportError(f"cannot write {target}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ExportError(f"cannot write {target}: folder {folder} is not writable")
    return target, fmt


def export_graph(graph: nx.DiGraph, path: str | os.PathLike, collapse_depth: int | None = None, *,
                 marks: Marks | None = None, options: ImageOptions | None = None,
                 expanded: set[str] | None = None) -> ExportResult:
    """Write ``graph`` to ``path`` in the format of its extension (see ``FORMATS``).

    ``collapse_depth`` first merges modules below that depth into boxes, ``expanded`` (the
    modules to open, e.g. ``core.layout.auto_view.auto_expanded``) every other one; ``marks`` (from
    ``core.marks.marks_from_findings``) are drawn in images and DOT and stored in JSON/GraphML.
    """
    target, fmt = check_target(path)
    opts = options or ImageOptions()
    if expanded is not None:
        from gradviz.core.layout.grouping import collapse
        graph = collapse(graph, expanded=expanded)
    elif collapse_depth is not None:
        from gradviz.core.layout.grouping import collapse
        graph = collapse(graph, depth=collapse_depth)
    if fmt.image:
        scene = image.scene_for(graph, marks, theme=opts.theme)
        return fmt.write(scene, image.make_page(scene, None, opts.legend), target, opts)
    if marks:
        graph = nx.DiGraph(graph)  # a copy: the caller's graph does not gain the marks
        graph.graph["marks"] = marks.on_view(graph).to_dict()
    fmt.write(graph, target)
    return ExportResult(target, [target])


def export_scene(scene, path: str | os.PathLike, options: ImageOptions | None = None,
                 region=None) -> ExportResult:
    """Draw ``scene`` as it is (its values, colours, groups, frames, marks) to an image;
    ``region`` (a scene QRectF, e.g. the view's visible part) crops it, else the whole graph."""
    target, fmt = check_target(path, images_only=True)
    opts = options or ImageOptions()
    if scene.graph is None:
        raise ExportError("there is no graph to export yet")
    result = fmt.write(scene, image.make_page(scene, region, opts.legend), target, opts)
    if result.note:
        log.info("%s: %s", target, result.note)
    return result


def render_image(graph: nx.DiGraph, layout, path: str | os.PathLike, scale: float = 2.0, dpi: float | None = None,
                 theme: str = "light", legend: bool = True) -> Path:
    """Draw ``graph`` at ``layout`` to ``path`` (.svg .png .pdf): a scene built here, then exported."""
    scene = image.scene_for(graph, theme=theme, layout=layout)
    return export_scene(scene, path, ImageOptions(scale=scale, dpi=dpi, theme=theme, legend=legend)).path
