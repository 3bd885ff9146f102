"""What the Compare view draws (no Qt): both sides grouped alike, and one graph coloured by B/A.

``compare_views(comparison)`` collapses side A's and side B's graphs with the same
expanded modules (B's first view, ~200 boxes), recomputing each box's gradient norm from
its members at the compared step (the module table stored with a run holds the norms of
the step it was traced at). ``ratio_view`` is B's view with ``grad_norm`` replaced by the
ratio B/A of each box or node — matched by id on one structure, by module/op/occurrence
across a fix — so the scene's log colour scale with ``RATIO_CMAP`` (blue: smaller in B,
white: unchanged, red: larger) shows where gradients changed. A gradient that vanished
is drawn at the blue end, one that appeared at the red end, NaN/Inf in B as NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from gradviz.core.attribution.figure import diverging_rgb
from gradviz.core.layout.grouping import auto_depth, collapse, expanded_to_depth
from gradviz.core.record.compare import Comparison, structure_keys

RATIO_CMAP: np.ndarray = diverging_rgb(np.linspace(-1.0, 1.0, 256), 1.0)   # (256, 3) uint8, blue -> white -> red
# a gradient that vanished or appeared is no ratio: its own colours, never the ends of the finite scale
# (a 5x drop at a x5 scale would else look exactly like a vanished gradient)
VANISHED_RGB = np.array([12, 16, 52], dtype=np.uint8)      # near-black navy
APPEARED_RGB = np.array([72, 0, 12], dtype=np.uint8)       # near-black maroon
_END = 16                                                   # colour-map entries each special colour takes
SCALE_CMAP: np.ndarray = np.vstack([np.repeat(VANISHED_RGB[None], _END, 0),
                                    RATIO_CMAP[np.linspace(0, 255, 256 - 2 * _END).round().astype(int)],
                                    np.repeat(APPEARED_RGB[None], _END, 0)])
LIMITS = (2.0, 5.0, 10.0, 100.0, 1e3, 1e4)   # the scale spans x1/L .. xL, L the first to hold 95 % of the ratios
MIN_LIMIT, MAX_LIMIT = LIMITS[0], LIMITS[-1]


@dataclass
class CompareViews:
    view_a: nx.DiGraph | None
    view_b: nx.DiGraph
    ratio: nx.DiGraph
    limit: float                         # colour scale of the ratio view: x1/limit .. xlimit
    expanded: set[str]
    norm_range: tuple[float, float]      # one gradient-norm range for both sides


def compare_views(comparison: Comparison, max_boxes: int = 220) -> CompareViews | None:
    """Both sides' views and the ratio view; None when side B has no graph (no node norms)."""
    b = comparison.b.graph
    if b is None:
        return None
    a = comparison.a.graph
    expanded = expanded_to_depth(b, auto_depth(b, max_boxes))
    view_b = _view(b, expanded)
    view_a = _view(a, expanded) if a is not None else None
    ratio, limit = ratio_view(view_a, view_b, comparison.matched_by)
    return CompareViews(view_a, view_b, ratio, limit, expanded, _norm_range(view_a, view_b))


def _view(graph: nx.DiGraph, expanded: set[str]) -> nx.DiGraph:
    view = collapse(graph, expanded={m for m in expanded if m in graph.graph.get("modules", {})})
    for nid, attrs in view.nodes(data=True):
        if attrs.get("kind") == "group":
            attrs["grad_norm"] = group_norm(graph, attrs.get("members", []))
    return view


def group_norm(graph: nx.DiGraph, members: list[str]) -> float | None:
    """A box's norm at the shown step: the norm of its parameters' gradients together
    (sqrt of the sum of squares), or, with no parameter gradient, the largest norm inside."""
    params = [graph.nodes[m].get("grad_norm") for m in members if graph.nodes[m].get("kind") == "param"]
    params = [p for p in params if p is not None]
    if params:
        return math.sqrt(sum(p * p for p in params)) if all(math.isfinite(p) for p in params) else math.nan
    others = [graph.nodes[m].get("grad_norm") for m in members]
    finite = [v for v in others if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


def scale_range(limit: float) -> tuple[float, float]:
    """The log range of ``SCALE_CMAP`` for a scale of x1/limit .. xlimit: finite ratios fall in
    its inner part, vanished and appeared gradients on its two ends (their own colours)."""
    half = math.log10(limit) * 128 / (128 - _END)
    return 10.0 ** -half, 10.0 ** half


def ratio_value(a: float | None, b: float | None, limit: float) -> float | None:
    """The value the ratio view colours: b/a clamped to x1/limit .. xlimit, ``scale_range``'s
    ends for vanished/appeared, NaN for non-finite b."""
    if b is not None and not math.isfinite(b):
        return math.nan
    vanished, appeared = scale_range(limit)
    if a is None or b is None:
        if a is None and b is None:
            return None
        return appeared if a is None else vanished
    if a == 0:
        return appeared if b > 0 else 1.0
    if b == 0:
        return vanished
    return min(max(b / a, 1.0 / limit), limit)


def ratio_view(view_a: nx.DiGraph | None, view_b: nx.DiGraph, matched_by: str) -> tuple[nx.DiGraph, float]:
    """B's view with ``grad_norm`` = ratio B/A (and ``norm_a``/``norm_b``/``norm_ratio``)."""
    g = view_b.copy()
    pairs = _pairs(view_a, view_b, matched_by)
    ratios = []
    for nid, nid_a in pairs.items():
        a, b = view_a.nodes[nid_a].get("grad_norm"), view_b.nodes[nid].get("grad_norm")
        if a and b and math.isfinite(a) and math.isfinite(b):
            ratios.append(abs(math.log10(b / a)))
    # two steps of one run change by x1.5, a fix by x100: a scale of x10 left the former all white
    spread = 10 ** float(np.percentile(ratios, 95)) if ratios else MIN_LIMIT
    limit = next((lim for lim in LIMITS if lim >= spread * (1 - 1e-9)), MAX_LIMIT)
    for nid, attrs in g.nodes(data=True):
        nid_a = pairs.get(nid)
        a = view_a.nodes[nid_a].get("grad_norm") if nid_a is not None else None
        b = attrs.get("grad_norm")
        attrs.update(norm_a=a, norm_b=b, norm_ratio=(b / a if a and b is not None else None))
        attrs["grad_norm"] = ratio_value(a, b, limit) if nid_a is not None else None
        attrs["grad_nan"] = int(attrs["grad_norm"] is not None and math.isnan(attrs["grad_norm"]))
        attrs["grad_inf"] = 0
    g.graph.update(ratio_limit=limit, loss=None)
    return g, limit


def _pairs(view_a: nx.DiGraph | None, view_b: nx.DiGraph, matched_by: str) -> dict[str, str]:
    if view_a is None:
        return {}
    if matched_by == "id":
        return {n: n for n in view_b if n in view_a}
    ka, kb = _keys(view_a), _keys(view_b)
    by_key = {k: n for n, k in ka.items()}
    return {n: by_key[k] for n, k in kb.items() if k in by_key}


def _keys(view: nx.DiGraph) -> dict[str, tuple]:
    keys = structure_keys(view)
    for nid, attrs in view.nodes(data=True):
        if attrs.get("kind") == "group":
            keys[nid] = ("group", attrs.get("module", ""))
    return keys


def _norm_range(*views: nx.DiGraph | None) -> tuple[float, float]:
    from gradviz.core.output.colors import auto_range

    norms = [a.get("grad_norm") for v in views if v is not None for _, a in v.nodes(data=True)]
    return auto_range(norms)
