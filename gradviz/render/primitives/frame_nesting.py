"""Which modules get a frame, how deeply frames nest, and the padding that nesting needs (no Qt).

Read by ``frames`` (building the frames of a drawn view) and by ``style.layout_graph`` (the layout
leaves room between layers for the stacked labels of nested frames), so it sits below both.
"""
from __future__ import annotations

import networkx as nx

from gradviz.core.trace.modules import prefixes

PAD_X = 6.0                   # side padding of an innermost frame (+4 per level of frames inside)
PAD_TOP = 17.0                # room for the label above the module's first row
PAD_BOTTOM = 6.0
LABEL_STEP = 14.0             # each level of nesting stacks its label above the inner one
MAX_LEVELS = 2                # padding stops growing past this nesting height
LABEL_PX = 10                 # a frame label's font size (semi-bold)
LABEL_CLEAR = 6.0             # between a label's plate and the first edge entering the frame right of it


def framed_modules(graph: nx.DiGraph) -> dict[str, list[str]]:
    """Module path -> view node ids drawn inside it, for every module drawn open.

    A collapsed box ``group:M`` counts as inside M's parents (not M: M is the box itself).
    Inputs and the loss belong to no module. The whole model ('') gets no frame. A chain of
    modules that hold exactly the same boxes (``resnet`` > ``resnet.encoder`` > ... each with
    one child) gets one frame, the innermost's, whose label is the full path anyway.
    """
    members: dict[str, list[str]] = {}
    for nid, attrs in graph.nodes(data=True):
        kind = attrs.get("kind")
        if kind in ("loss", "input"):
            continue
        module = attrs.get("module") or ""
        paths = prefixes(module)[:-1] if kind == "group" else prefixes(module)
        for path in paths:
            if path:
                members.setdefault(path, []).append(nid)
    innermost: dict[frozenset, str] = {}
    for path in sorted(members, key=lambda p: p.count(".")):   # deeper ones replace their outer chain
        innermost[frozenset(members[path])] = path
    keep = set(innermost.values())
    return {path: ids for path, ids in members.items() if path in keep}


def nesting_heights(modules: list[str]) -> dict[str, int]:
    """Nesting height: 0 for a frame with no framed module inside, else 1 + the tallest inside."""
    height = {m: 0 for m in modules}
    for m in sorted(modules, key=lambda p: -p.count(".")):
        parent = m.rpartition(".")[0]
        while parent and parent not in height:
            parent = parent.rpartition(".")[0]
        if parent:
            height[parent] = max(height[parent], height[m] + 1)
    return height


def padding(height: int) -> tuple[float, float, float]:
    """(side, top, bottom) padding of a frame with ``height`` levels of frames inside:
    each level adds room for its own label above the inner ones."""
    h = min(height, MAX_LEVELS)
    return PAD_X + 4.0 * h, PAD_TOP + LABEL_STEP * h, PAD_BOTTOM + 4.0 * h


def nesting_height(graph: nx.DiGraph) -> int:
    """Levels of frames inside the outermost frame (capped): the layout leaves room for their labels."""
    levels = nesting_heights(list(framed_modules(graph)))
    return min(max(levels.values(), default=-1) + 1, MAX_LEVELS + 1)


def frame_label(graph: nx.DiGraph, module: str) -> str:
    """The text at a frame's top-left: the module path and its type."""
    mtype = (graph.graph.get("modules", {}).get(module) or {}).get("type") or ""
    return f"{module} · {mtype}" if mtype else module


def label_room(graph: nx.DiGraph, text_width) -> dict[str, float]:
    """Module path -> the width its frame's label needs at the frame's top-left (the plate, 2 px in
    from the side and 3 px past the text each way, then ``LABEL_CLEAR``), with ``text_width(text)``
    measuring in the label font: the layout keeps the edges entering the module's first row right
    of it, and ``parts.frames`` widens the frame to it."""
    return {m: room_for(text_width(frame_label(graph, m))) for m in framed_modules(graph)}


def room_for(text_width: float) -> float:
    """The room a label ``text_width`` wide takes at a frame's top-left (``label_room``)."""
    return text_width + 8.0 + LABEL_CLEAR
