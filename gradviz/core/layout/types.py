"""What a layout takes and gives: ``LayoutOptions``, ``Layout``, and the boxes' sizes.

Shared by the built-in layered layout (``layered``) and the Graphviz option (``graphviz_dot``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping

import networkx as nx

__all__ = ["LayoutOptions", "Layout", "node_size", "box_sizes"]


@dataclass
class LayoutOptions:
    node_gap: float = 24.0  # horizontal gap between boxes in a layer
    layer_gap: float = 56.0  # vertical gap between layers
    sweeps: int = 4  # crossing-reduction sweeps (alternating down/up)
    group_by_module: bool = True  # keep nodes of one ``module`` contiguous in each layer
    x_passes: int = 12  # neighbour-pull passes of the x assignment
    component_gap: float = 48.0  # horizontal gap between disconnected components
    pull_down_sources: bool = True  # put parameters right above the op that uses them
    max_span: int = 64  # edges spanning more layers are drawn straight, without bend points
    clusters: bool = True  # with group_by_module: every module one rectangle (``clusters``)
    cluster_pad: float = 8.0  # room between a module's border and its boxes (innermost module)
    cluster_pad_step: float = 4.0  # more per level of modules inside (up to two levels)
    cluster_gap: float = 8.0  # between the borders of two modules side by side


@dataclass
class Layout:
    pos: dict[Hashable, tuple[float, float]]  # centre of each node's box
    size: dict[Hashable, tuple[float, float]]  # (width, height) used
    edges: dict[tuple, list[tuple[float, float]]]  # polyline per edge (u, v), u's box -> v's box
    layer: dict[Hashable, int]
    width: float
    height: float
    n_dummies: int = 0  # bend points added for edges spanning several layers


def node_size(node: Hashable, attrs: dict) -> tuple[float, float]:
    """Box size when the caller gives none (``sizes``): ``width``/``height`` attributes, else
    estimated from the label. Drawn graphs get sizes measured in the drawing's fonts
    (``gradviz.render.primitives.style.box_sizes``)."""
    if "width" in attrs and "height" in attrs:
        return float(attrs["width"]), float(attrs["height"])
    label = attrs.get("label")
    label = str(node) if label is None else str(label)
    width = float(attrs.get("width", max(56.0, 7.0 * len(label) + 20.0)))
    return width, float(attrs.get("height", 28.0))


def box_sizes(graph: nx.DiGraph, nodes: list, sizes: Mapping | None) -> list[tuple[float, float]]:
    """Each of ``nodes``' (width, height): from ``sizes`` where given, else ``node_size``."""
    given = sizes or {}
    return [given[node] if node in given else node_size(node, graph.nodes[node]) for node in nodes]


# ----------------------------------------------------------------------------- graph walks
