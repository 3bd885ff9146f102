"""Graphs in Jupyter: the traced graph shows itself inline as the coloured SVG with its legend.

``gradviz.trace(...)`` returns a ``TracedGraph``: a ``networkx.DiGraph`` (everything networkx
does works on it) that Jupyter displays as the drawing the app and ``gradviz export x.svg`` make
(``_repr_svg_``: one ``image/svg+xml`` picture per output, the smallest bundle Jupyter renders — not
a second copy as ``text/html``). ``graph.show(collapse=1)`` or ``gradviz.show(loss, model=model,
collapse=1)`` pick how deep modules are expanded; the default, ``collapse="auto"``, is the deepest
view of at most ``NOTEBOOK_BOXES`` (60) boxes with repeated blocks folded: readable in a cell. A loss
traced after its forward (no ``gradviz.capture``) is grouped into modules from its parameters
(``core/trace/module_guess.py``), so it folds too. Drawing uses Qt offscreen, loaded at the first
display — ``import gradviz`` and tracing never load it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx

__all__ = ["TracedGraph", "GraphPicture", "show", "trace", "NOTEBOOK_BOXES"]

NOTEBOOK_BOXES = 60     # collapse="auto" in a cell: the deepest module view with at most this many boxes


def _depth(graph: nx.DiGraph, collapse: Any) -> int | None:
    if collapse is None or collapse is False:
        return None
    if collapse == "auto":
        from gradviz.core.layout.grouping import auto_depth

        return auto_depth(graph, max_boxes=NOTEBOOK_BOXES)
    if isinstance(collapse, bool) or not isinstance(collapse, int) or collapse < 0:
        raise ValueError(f"collapse is a module depth (0, 1, 2 ...), 'auto' or None, not {collapse!r}")
    return collapse


def svg_text(graph: nx.DiGraph, collapse: Any = "auto", theme: str = "light") -> str:
    """The graph drawn as gradviz exports it to .svg (colours by gradient norm, legend), as text."""
    from gradviz.render.export.formats import ImageOptions, export_graph
    from gradviz.render.export.svg_compact import compact_svg
    from gradviz.render.primitives.qtcompat import ensure_app

    ensure_app()   # offscreen when there is no display (a notebook server)
    depth = _depth(graph, collapse)
    with tempfile.TemporaryDirectory(prefix="gradviz-nb-") as folder:
        target = Path(folder) / "graph.svg"
        export_graph(nx.DiGraph(graph), target, collapse_depth=depth, options=ImageOptions(theme=theme))
        return compact_svg(target.read_text(encoding="utf-8"))   # Qt's styles once as classes: ~half the bytes


class GraphPicture:
    """A drawing of a graph for Jupyter (what ``show`` returns); ``.svg`` is the text."""

    def __init__(self, graph: nx.DiGraph, collapse: Any = "auto", theme: str = "light") -> None:
        self.graph, self.collapse, self.theme = graph, collapse, theme
        self._svg: str | None = None

    @property
    def svg(self) -> str:
        if self._svg is None:
            self._svg = svg_text(self.graph, self.collapse, self.theme)
        return self._svg

    def _repr_svg_(self) -> str:
        # the only rich repr: Jupyter stores every _repr_*_ a result has, so a text/html twin of the same
        # SVG doubled every cell (issue #28: 1 MB for a 2-layer GPT-2)
        return self.svg

    def __repr__(self) -> str:
        n = self.graph.number_of_nodes()
        return f"<gradviz picture: {n:,} nodes" + (f", collapse={self.collapse!r}>" if self.collapse else ">")

    def save(self, path: str | os.PathLike) -> Path:
        Path(path).write_text(self.svg, encoding="utf-8")
        return Path(path)


class TracedGraph(nx.DiGraph):
    """The graph ``gradviz.trace`` returns: a networkx DiGraph that draws itself in Jupyter."""

    def show(self, collapse: Any = "auto", theme: str = "light") -> GraphPicture:
        return GraphPicture(self, collapse, theme)

    def _repr_svg_(self) -> str:
        return self.show()._repr_svg_()


def trace(source: Any, model: Any = None, **kwargs: Any) -> TracedGraph:
    """``gradviz.core.trace.tracer.trace`` (same arguments), returning a ``TracedGraph``."""
    from gradviz.core.trace.tracer import trace as core_trace

    return TracedGraph(core_trace(source, model, **kwargs))


def show(loss_or_graph: Any, model: Any = None, collapse: Any = "auto", theme: str = "light",
         **trace_options: Any) -> GraphPicture:
    """Display a graph inline: a traced graph, or a loss tensor / script path traced first."""
    graph = loss_or_graph if isinstance(loss_or_graph, nx.DiGraph) else trace(loss_or_graph, model, **trace_options)
    return GraphPicture(graph, collapse, theme)
