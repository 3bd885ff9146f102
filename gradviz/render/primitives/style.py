"""Look of the graph: themes, fonts, and the box size of each node kind.

Box sizes are measured here with the fonts the scene paints with (this thread's metrics,
``render.primitives.metrics``) and handed to the layout engine as an input (``layout(graph,
sizes=...)``): data flows one way, render -> core layout -> render scene. Use
``layout_graph(graph)`` to lay out a graph meant for ``GraphScene``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Hashable

import networkx as nx
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont

from gradviz.core.runtime.formatting import number, shape_text
from gradviz.render.primitives import metrics
from gradviz.render.primitives.fold_paint import fold_lines, fold_size
from gradviz.render.primitives import frame_nesting
from gradviz.render.primitives.frame_nesting import LABEL_STEP, nesting_height

LABEL_PX = 12          # primary text of a box
SMALL_PX = 10          # shapes, module types, counts
MAX_TEXT_W = 210.0     # longer labels are elided (full text in the tooltip)
PAD_X = 14.0
ONE_LINE_H = 30.0      # op
TWO_LINE_H = 42.0      # param / input / leaf: name + shape
LOSS_H = 44.0
GROUP_HEADER_H = 20.0
GROUP_H = 54.0
MIN_W = 60.0


@dataclass(frozen=True)
class Theme:
    name: str
    background: str
    edge: str               # subtle: edges must not compete with nodes
    edge_label: str
    outline: str            # op boxes
    strong_outline: str     # parameters (thick)
    muted_text: str         # secondary text on the background
    group_header: str       # folder tab tint drawn over the group's fill
    accent: str             # selection / highlight
    broken: str             # edges marked broken
    unreachable: str        # dashed outline of parameters no gradient reached
    dim_opacity: float = 0.28

    def color(self, field: str) -> QColor:
        return QColor(getattr(self, field))


LIGHT = Theme("light", background="#ffffff", edge="#9aa3af", edge_label="#6b7280", outline="#4b5563",
              strong_outline="#111827", muted_text="#6b7280", group_header="#00000022", accent="#2563eb",
              broken="#dc2626", unreachable="#9ca3af")
DARK = Theme("dark", background="#1e1f22", edge="#6b7280", edge_label="#9ca3af", outline="#d1d5db",
             strong_outline="#f9fafb", muted_text="#9ca3af", group_header="#00000033", accent="#60a5fa",
             broken="#f87171", unreachable="#6b7280")
THEMES = {"light": LIGHT, "dark": DARK}


def theme(name_or_theme: str | Theme | None) -> Theme:
    if isinstance(name_or_theme, Theme):
        return name_or_theme
    return THEMES.get(name_or_theme or "light", LIGHT)


@lru_cache(maxsize=None)
def font(px: int, weight: int = 400) -> QFont:
    """The GUI thread's font (cached; painting happens there). Other threads measure
    with ``render.primitives.metrics``, which builds fonts of their own."""
    return metrics.make_font(px, weight)


def label_font() -> QFont:
    return font(LABEL_PX, 500)


def small_font() -> QFont:
    return font(SMALL_PX, 400)


def header_font() -> QFont:
    return font(LABEL_PX - 1, 600)


def text_width(text: str, px: int = LABEL_PX, weight: int = 500) -> float:
    return metrics.text_width(text, px, weight)


def elide(text: str, width: float, px: int = LABEL_PX, weight: int = 500,
          mode: Qt.TextElideMode = Qt.ElideRight) -> str:
    return metrics.elide(text, width, px, weight, mode)


# -- what each box says -------------------------------------------------------------

def node_lines(nid: Hashable, attrs: dict) -> tuple[str, str]:
    """(primary, secondary) text of a node box; secondary may be ''."""
    kind = attrs.get("kind", "op")
    label = str(attrs.get("label") or nid)
    if kind == "group" and attrs.get("fold"):
        return fold_lines(attrs)
    if kind == "group":
        mtype = attrs.get("module_type") or ""
        n = attrs.get("n_nodes", 0)
        facts = attrs.get("facts") or f"{n} node{'s' if n != 1 else ''}"   # core/layout/box_facts.py
        return attrs.get("module") or label, f"{mtype} · {facts}" if mtype else facts
    if kind in ("param", "input", "leaf"):
        return label, shape_text(attrs.get("shape"))
    if kind == "loss":
        value = attrs.get("value")
        return label, (number(value) if isinstance(value, (int, float)) else "")
    return label, str(attrs.get("note") or "")


def tooltip_text(nid: Hashable, attrs: dict) -> str:
    """A node's hover text: label, op, module, shape, source line."""
    parts = [str(attrs.get("label") or nid)]
    if attrs.get("op"):
        parts.append(str(attrs["op"]))
    if attrs.get("module"):
        parts.append(f"{attrs['module']} ({attrs.get('module_type') or '?'})")
    shape = shape_text(attrs.get("shape"))
    if shape:
        parts.append(shape)
    if attrs.get("location"):
        parts.append(str(attrs["location"]))
    return "\n".join(parts)


def box_size(nid: Hashable, attrs: dict) -> tuple[float, float]:
    """Box (width, height) for a node, from its text in the scene's fonts, in whole pixels."""
    kind = attrs.get("kind", "op")
    if kind == "group" and attrs.get("fold"):
        return fold_size(attrs, text_width)
    primary, secondary = node_lines(nid, attrs)
    if kind == "group":
        w = max(text_width(primary, LABEL_PX - 1, 600) + 18, text_width(secondary, SMALL_PX, 400))
        return float(math.ceil(max(MIN_W + 40, min(w, MAX_TEXT_W + 40) + 2 * PAD_X))), GROUP_H
    w = max(text_width(primary), text_width(secondary, SMALL_PX, 400) if secondary else 0.0)
    w = min(w, MAX_TEXT_W) + 2 * PAD_X
    if kind == "loss":
        w, h = max(w + 28, 84.0), LOSS_H
    else:
        if kind in ("input", "leaf"):
            w += 12  # the slanted / round ends eat into the text area
        w, h = max(w, MIN_W), TWO_LINE_H if secondary else ONE_LINE_H
    return float(math.ceil(w)), h  # whole pixels: crisp edges


def box_sizes(graph: nx.DiGraph) -> dict[Hashable, tuple[float, float]]:
    """``box_size`` of every node: the ``sizes`` input of ``gradviz.core.layout.layered.layout``."""
    return {nid: box_size(nid, attrs) for nid, attrs in graph.nodes(data=True)}


def layout_graph(graph: nx.DiGraph, options: Any = None):
    """``gradviz.core.layout.layered.layout`` with box sizes that fit the scene's text."""
    from gradviz.core.layout.layered import layout
    from gradviz.core.layout.types import LayoutOptions

    opts = options or LayoutOptions()
    levels = nesting_height(graph)   # nested module frames stack their labels between layers
    if levels > 1:
        opts = replace(opts, layer_gap=opts.layer_gap + LABEL_STEP * (levels - 1))
    return layout(graph, opts, sizes=box_sizes(graph), label_room=frame_label_room(graph))


def frame_label_room(graph: nx.DiGraph) -> dict[str, float]:
    """``frame_nesting.label_room`` measured in the frames' label font: ``layout``'s ``label_room``."""
    return frame_nesting.label_room(graph, lambda text: text_width(text, frame_nesting.LABEL_PX, 600))
