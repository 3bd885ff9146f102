"""Which grouping a graph opens with: the whole graph in the window, legible.

The automatic grouping (about 200 boxes, ``grouping.auto_depth``) is shown when its
layout fits the window at a scale where box labels can be read (``LEGIBLE_SCALE``).
Otherwise coarser groupings are tried, down to the collapsed overview (one box per
top-level module), which is shown fitted whatever its size. So a graph always opens
whole and fitted — never on a corner of a tower — and the user expands from there.
(In a window too small for anything to be legible, the deepest grouping about as large
on screen as the overview is shown: a small MLP then still opens with every op.)
No Qt here: the layout is ``session.layout_view`` (run in the trace job's thread).
"""
from __future__ import annotations

from typing import Any, Callable

import networkx as nx

LEGIBLE_SCALE = 0.6      # 12 px labels drawn at >= 7 px: readable
NEAR_OVERVIEW = 0.8      # a grouping drawn at 80 % of the overview's scale is as readable as it
FIT_PAD = 24.0           # what GraphView.fit adds around the graph (12 px each side)


def fit_scale(layout: Any, size: tuple[float, float]) -> float:
    """The scale ``GraphView.fit`` will show ``layout`` at in a ``size`` (w, h) viewport."""
    w, h = size
    return min(w / (layout.width + FIT_PAD), h / (layout.height + FIT_PAD))


def choose_grouping(graph: nx.DiGraph, size: tuple[float, float] | None, max_boxes: int,
                    lay_out: Callable[[nx.DiGraph], Any], check: Callable[[], None] = lambda: None,
                    ) -> tuple[set[str], nx.DiGraph, Any]:
    """(expanded modules, view, layout) of the first view. ``size``: the viewport the graph
    will be fitted to (None: unknown, the automatic grouping is used); ``check`` raises when
    the job was cancelled between two tries.

    The deepest grouping (from the automatic one down) that is legible when fitted is chosen;
    in a window too small for any of them to be legible, the deepest one that is nearly as
    large on screen as the overview (``NEAR_OVERVIEW``): folding boxes that gain nothing in
    size would only hide the graph."""
    from gradviz.core.layout.grouping import auto_depth, collapse, expanded_to_depth

    def view_at(depth: int) -> tuple[set[str], nx.DiGraph, Any]:
        expanded = expanded_to_depth(graph, depth)
        view = collapse(graph, expanded=expanded)
        return expanded, view, lay_out(view)

    depth = auto_depth(graph, max_boxes)
    if size is None or depth <= 1:
        return view_at(depth)
    overview = view_at(1)
    wanted = min(LEGIBLE_SCALE, NEAR_OVERVIEW * fit_scale(overview[2], size))
    for d in range(depth, 1, -1):
        check()
        chosen = view_at(d)
        if fit_scale(chosen[2], size) >= wanted:
            return chosen
    return overview
