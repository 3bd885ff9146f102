"""Which grouping a graph opens with: the whole graph in the window, legible.

The automatic view (about 40 boxes, repeated blocks folded, the largest modules opened:
``core/layout/auto_view.py``, the same view ``export --collapse auto`` and notebooks draw) is
shown when its layout fits the window at a scale where box labels can be read
(``LEGIBLE_SCALE``). Otherwise the automatic view on smaller budgets is tried, down to the
collapsed overview (one box per top-level module), which is shown fitted whatever its size. So a graph always opens
whole and fitted — never on a corner of a tower — and the user expands from there.
(In a window too small for anything to be legible, the deepest grouping about as large
on screen as the overview is shown: a small MLP then still opens with every op.)
No Qt here: the layout is ``session.layout_view`` (run in the trace job's thread).
"""
from __future__ import annotations

from typing import Any, Callable

import networkx as nx

LEGIBLE_SCALE = 0.5      # 12 px labels drawn at >= 6 px (module names below it at a fixed 11 px: far_labels).
                         # 0.6 before module frames became rectangles: a row more at each module boundary
                         # makes the digits MLP 1234 px tall, not 890, and 0.53 is its whole picture in the window
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
    will be fitted to (None: unknown, the automatic view is used as it is); ``max_boxes``: the
    automatic view's budget; ``check`` raises when the job was cancelled between two tries.

    The automatic view on the largest budget (``max_boxes``, then halved) that is legible
    when fitted is chosen; in a window too small for any of them to be legible, the largest
    one that is nearly as large on screen as the overview (``NEAR_OVERVIEW``): closing boxes
    that gain nothing in size would only hide the graph. The smaller views keep the folds
    of the automatic one open (``fold_parents``): "GPT2Block × 12" is what a model's picture
    is about, and the budget is spent around it; the last resort is the smallest view that
    still shows them (the overview when there are none)."""
    from gradviz.core.layout.auto_view import auto_expanded
    from gradviz.core.layout.grouping import collapse

    def view_of(expanded: set[str]) -> tuple[set[str], nx.DiGraph, Any]:
        view = collapse(graph, expanded=expanded)
        return expanded, view, lay_out(view)

    first = view_of(auto_expanded(graph, max_boxes))
    if size is None:
        return first
    keep = fold_parents(first[1])
    smallest = auto_expanded(graph, 0, keep=keep)
    if first[0] == smallest:
        return first
    last = view_of(smallest)
    wanted = min(LEGIBLE_SCALE, NEAR_OVERVIEW * fit_scale(last[2], size))
    budget, chosen = max_boxes, first
    while True:
        if fit_scale(chosen[2], size) >= wanted:
            return chosen
        budget //= 2
        if budget < 4:
            return last
        check()
        expanded = auto_expanded(graph, budget, keep=keep)
        if expanded == smallest:
            return last
        chosen = view_of(expanded)


def fold_parents(view: nx.DiGraph) -> set[str]:
    """The modules that must stay open for the fold boxes of ``view`` to show."""
    from gradviz.core.trace.modules import prefixes

    return {q for a in view.nodes.values() if a.get("fold") for q in prefixes(a.get("parent") or "")}
