"""Graphs in Jupyter: the traced graph shows itself inline as the coloured SVG with its legend.

``gradviz.trace(...)`` returns a ``TracedGraph``: a ``networkx.DiGraph`` (everything networkx
does works on it) that Jupyter displays as the drawing the app and ``gradviz export x.svg`` make
(``_repr_svg_``: one ``image/svg+xml`` picture per output, the smallest bundle Jupyter renders — not
a second copy as ``text/html``). ``graph.show(collapse=1)`` or ``gradviz.show(loss, model=model,
collapse=1)`` pick how deep modules are expanded; the default, ``collapse="auto"``, is the automatic
view the window and ``gradviz export --collapse auto`` open (``core/layout/auto_view.py``): at most
``NOTEBOOK_BOXES`` (40) boxes, repeated blocks folded, the largest modules opened: readable in a cell.
A loss traced after its forward (no ``gradviz.capture``) is grouped into modules from its parameters
(``core/trace/module_guess.py``), so it folds too. Drawing uses Qt offscreen, loaded at the first
display — ``import gradviz`` and tracing never load it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx

__all__ = ["TracedGraph", "GraphPicture", "show", "trace", "check", "NOTEBOOK_BOXES"]

NOTEBOOK_BOXES = 40     # collapse="auto" in a cell: the automatic view's budget (= core/layout/auto_view.AUTO_BOXES)


def _expanded(graph: nx.DiGraph, collapse: Any) -> set[str] | None:
    """The modules a ``collapse`` setting opens: the window's and the export's automatic view for
    "auto" (``core/layout/auto_view.py``)."""
    from gradviz.core.layout.auto_view import auto_expanded, expanded_for

    if isinstance(collapse, str) and collapse != "auto":
        raise ValueError(f"collapse is a module depth (0, 1, 2 ...), 'auto' or None, not {collapse!r}")
    return auto_expanded(graph, NOTEBOOK_BOXES) if collapse == "auto" else expanded_for(graph, collapse)


def svg_text(graph: nx.DiGraph, collapse: Any = "auto", theme: str = "light") -> str:
    """The graph drawn as gradviz exports it to .svg (colours by gradient norm, legend), as text."""
    from gradviz.render.export.formats import ImageOptions, export_graph
    from gradviz.render.export.svg_compact import compact_svg
    from gradviz.render.primitives.metrics import measured_families
    from gradviz.render.primitives.qtcompat import ensure_app

    ensure_app()   # offscreen when there is no display (a notebook server)
    expanded = _expanded(graph, collapse)
    with tempfile.TemporaryDirectory(prefix="gradviz-nb-") as folder:
        target = Path(folder) / "graph.svg"
        export_graph(nx.DiGraph(graph), target, expanded=expanded, options=ImageOptions(theme=theme))
        # Qt's styles once as classes (a quarter of the bytes), texts in the font their boxes were sized with
        return compact_svg(target.read_text(encoding="utf-8"), measured_families())


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


MODEL_OPTIONS = ("inputs", "loss", "weights", "config")


def _script_of(source: Any, options: dict) -> Any:
    """What the CLI accepts as SCRIPT, made a model script: ``pkg.mod:callable`` (with ``inputs=``), a
    ``.pt2``, ``@sample``, a script with ``weights=``; anything else is returned as it is."""
    model_options = {k: options.pop(k) for k in MODEL_OPTIONS if k in options}
    if not isinstance(source, (str, os.PathLike)):
        if model_options:
            raise TypeError(f"{', '.join(model_options)}: for a model named by text (a script, PACKAGE.MODULE:"
                            "CALLABLE, a .pt2, @sample), not a {type(source).__name__}")
        return source
    from gradviz.core.script.generated import model_source

    inputs = model_options.get("inputs")
    if isinstance(inputs, str):
        inputs = [inputs]
    path, _ = model_source(os.fspath(source), list(inputs) if inputs else None, model_options.get("loss"),
                           model_options.get("weights"), model_options.get("config"))
    return path


def _module_forward(model: Any, inputs: Any) -> tuple[Any, Any]:
    """``trace(model, inputs=(x,))``: one forward under ``gradviz.capture`` (modules known), loss = sum of
    the output (its ``.logits`` for transformers); returns (loss, capture)."""
    from gradviz.core.script.factory import first_tensor
    from gradviz.core.trace.tracer import capture

    args = inputs if isinstance(inputs, tuple) else (inputs,)
    with capture(model) as cap:
        out = first_tensor(model(*args))
        if out is None:
            raise TypeError(f"the output of {type(model).__name__} holds no floating-point tensor to trace")
        loss = out.float().sum()
    return loss, cap


def trace(source: Any, model: Any = None, **kwargs: Any) -> TracedGraph:
    """Trace what the command line takes — a script path, ``"pkg.mod:callable"`` (``inputs=["2,16:long"]``,
    ``config="n_layer=2"``, ``loss=``, ``weights=``), a ``.pt2``, ``"@mlp_digits"`` — or a loss tensor
    (``model=`` names the parameters), or a module with ``inputs=(x,)`` (traced under ``gradviz.capture``).
    The other keywords are ``gradviz.core.trace.tracer.trace``'s; returns a ``TracedGraph``."""
    from torch import nn

    from gradviz.core.trace.tracer import trace as core_trace

    if isinstance(source, nn.Module):
        if "inputs" not in kwargs:
            raise TypeError(f"gradviz.trace({type(source).__name__}): give its forward's inputs, "
                            "trace(model, inputs=(x,)), or trace a loss: trace(loss, model=model)")
        loss, cap = _module_forward(source, kwargs.pop("inputs"))
        return TracedGraph(core_trace(loss, source, capture=cap, **kwargs))
    return TracedGraph(core_trace(_script_of(source, kwargs), model, **kwargs))


def check(source: Any, steps: int = 0, **kwargs: Any) -> list:
    """The gradient health checklist (``gradviz check``) on what the command line takes: a script path,
    ``"pkg.mod:callable"`` with ``inputs=``, a ``.pt2``, ``"@sample"``. A loss tensor or a model object is
    refused with what to pass instead: the checklist re-runs the forward, so it needs what builds the model."""
    import torch
    from torch import nn

    from gradviz.core.diagnosis import check as core_check

    if isinstance(source, (torch.Tensor, nn.Module)):
        what = "a loss tensor" if isinstance(source, torch.Tensor) else f"a {type(source).__name__} object"
        raise TypeError(f"gradviz.check got {what}: the checklist re-runs forward and backward many times, so it "
                        "needs what builds the model — a script path, 'pkg.mod:callable' with inputs=[...], a .pt2 "
                        "or '@sample'. For the graph of a model you hold, use gradviz.trace(loss, model=model) "
                        "or gradviz.trace(model, inputs=(x,))")
    return core_check(_script_of(source, kwargs), steps, **kwargs)


def show(loss_or_graph: Any, model: Any = None, collapse: Any = "auto", theme: str = "light",
         **trace_options: Any) -> GraphPicture:
    """Display a graph inline: a traced graph, or anything ``trace`` takes, traced first."""
    graph = loss_or_graph if isinstance(loss_or_graph, nx.DiGraph) else trace(loss_or_graph, model, **trace_options)
    return GraphPicture(graph, collapse, theme)
