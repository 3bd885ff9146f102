"""Graphs in Jupyter: the traced graph shows itself inline as the coloured SVG with its legend.

``gradviz.trace(...)`` returns a ``TracedGraph``: a ``networkx.DiGraph`` (everything networkx
does works on it) that Jupyter displays as the drawing the app and ``gradviz export x.svg`` make
(``_repr_svg_`` / ``_repr_html_``). ``graph.show(collapse=1)`` or ``gradviz.show(loss, model=model,
collapse=1)`` pick how deep modules are expanded; the default is the app's first view
(``collapse="auto"``: about 40 boxes, repeated blocks folded, ``core/layout/auto_view.py``).
Drawing uses Qt offscreen, loaded at the first display —
``import gradviz`` and tracing never load it.
"""
from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx

__all__ = ["TracedGraph", "GraphPicture", "show", "trace"]


def _expanded(graph: nx.DiGraph, collapse: Any) -> set[str] | None:
    """The modules a ``collapse`` setting opens: the window's and the export's automatic view for
    "auto" (``core/layout/auto_view.py``)."""
    from gradviz.core.layout.auto_view import expanded_for

    if isinstance(collapse, str) and collapse != "auto":
        raise ValueError(f"collapse is a module depth (0, 1, 2 ...), 'auto' or None, not {collapse!r}")
    return expanded_for(graph, collapse)


def svg_text(graph: nx.DiGraph, collapse: Any = "auto", theme: str = "light") -> str:
    """The graph drawn as gradviz exports it to .svg (colours by gradient norm, legend), as text."""
    from gradviz.render.export.formats import ImageOptions, export_graph
    from gradviz.render.primitives.qtcompat import ensure_app

    ensure_app()   # offscreen when there is no display (a notebook server)
    expanded = _expanded(graph, collapse)
    with tempfile.TemporaryDirectory(prefix="gradviz-nb-") as folder:
        target = Path(folder) / "graph.svg"
        export_graph(nx.DiGraph(graph), target, expanded=expanded, options=ImageOptions(theme=theme))
        return target.read_text(encoding="utf-8")


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
        return self.svg

    def _repr_html_(self) -> str:
        # a scrolling box: a 500-node graph is taller than a notebook cell should be
        n = self.graph.number_of_nodes()
        caption = html.escape(f"gradviz: {n:,} nodes" + (f", collapse={self.collapse!r}" if self.collapse else ""))
        return (f'<div style="max-height:720px;overflow:auto;border:1px solid #ddd">{self.svg}</div>'
                f'<div style="font-size:smaller;color:#666">{caption}</div>')

    def save(self, path: str | os.PathLike) -> Path:
        Path(path).write_text(self.svg, encoding="utf-8")
        return Path(path)


class TracedGraph(nx.DiGraph):
    """The graph ``gradviz.trace`` returns: a networkx DiGraph that draws itself in Jupyter."""

    def show(self, collapse: Any = "auto", theme: str = "light") -> GraphPicture:
        return GraphPicture(self, collapse, theme)

    def _repr_svg_(self) -> str:
        return self.show()._repr_svg_()

    def _repr_html_(self) -> str:
        return self.show()._repr_html_()


def trace(source: Any, model: Any = None, **kwargs: Any) -> TracedGraph:
    """``gradviz.core.trace.tracer.trace`` (same arguments), returning a ``TracedGraph``."""
    from gradviz.core.trace.tracer import trace as core_trace

    return TracedGraph(core_trace(source, model, **kwargs))


def show(loss_or_graph: Any, model: Any = None, collapse: Any = "auto", theme: str = "light",
         **trace_options: Any) -> GraphPicture:
    """Display a graph inline: a traced graph, or a loss tensor / script path traced first."""
    graph = loss_or_graph if isinstance(loss_or_graph, nx.DiGraph) else trace(loss_or_graph, model, **trace_options)
    return GraphPicture(graph, collapse, theme)
