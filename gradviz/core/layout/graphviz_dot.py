"""Graphviz's ``dot`` as an optional second layout engine: the same ``Layout`` as ``layered``.

Used to compare against Graphviz (tests, benchmarks) and by users who have ``dot`` installed;
gradviz never needs it. Kept apart from the built-in layered layout, which must not depend on it.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Hashable, Mapping

import networkx as nx

from gradviz.core.layout.types import Layout, LayoutOptions, box_sizes


def graphviz_layout(graph: nx.DiGraph, opts: LayoutOptions, timeout: float | None,
                    sizes: list[tuple[float, float]], clusters: bool = False) -> Layout:
    """The ``Layout`` of ``graph`` computed by Graphviz ``dot -Tplain``; ``sizes`` per node, in order.
    ``clusters``: each module a ``subgraph cluster_*`` nested like the module tree (how torchview
    draws modules as boxes inside boxes).

    Raises ``RuntimeError`` when ``dot`` is not installed or fails.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz 'dot' is not installed")
    nodes = list(graph.nodes)
    if not nodes:
        return Layout({}, {}, {}, {}, 0.0, 0.0)
    size = dict(zip(nodes, sizes))
    name = {node: f"n{i}" for i, node in enumerate(nodes)}
    lines = [f"digraph G {{ nodesep={opts.node_gap / 72:.3f}; ranksep={opts.layer_gap / 72:.3f};",
             'node [shape=box, fixedsize=true, label=""];']
    lines += [f"{name[v]} [width={w / 72:.4f}, height={h / 72:.4f}];" for v, (w, h) in size.items()]
    if clusters:
        lines += _cluster_lines(graph, name)
    edge_list = [(u, v) for u, v in graph.edges if u != v]
    lines += [f"{name[u]} -> {name[v]};" for u, v in edge_list]
    lines.append("}")
    proc = subprocess.run([exe, "-Tplain"], input="\n".join(lines), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"dot failed: {proc.stderr.strip()[:500]}")
    return _parse_plain(proc.stdout, nodes, name, size, edge_list)


def _cluster_lines(graph: nx.DiGraph, name: dict) -> list[str]:
    """Nested ``subgraph cluster_k { ... }`` blocks, one per module that holds a node."""
    from gradviz.core.layout.clusters import node_cluster_path

    tree: dict[str, dict] = {}
    for v, attrs in graph.nodes(data=True):
        path = node_cluster_path(attrs)
        at = tree
        for part in path.split(".") if path else []:
            at = at.setdefault(part, {})
        at.setdefault("\0nodes", []).append(name[v])
    out: list[str] = []
    counter = [0]

    def emit(sub: dict) -> None:
        for key, child in sub.items():
            if key == "\0nodes":
                continue
            counter[0] += 1
            out.append(f"subgraph cluster_{counter[0]} {{")
            out.extend(f"{n};" for n in child.get("\0nodes", []))
            emit(child)
            out.append("}")

    emit(tree)
    return out


def _parse_plain(text: str, nodes: list, name: dict, size: dict, edge_list: list) -> Layout:
    """Parse ``dot -Tplain`` (inches, y up) into a ``Layout`` (pixels, y down)."""
    by_name = {v: k for k, v in name.items()}
    height = 0.0
    raw_pos: dict[Hashable, tuple[float, float]] = {}
    raw_edges: dict[tuple, list[tuple[float, float]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "graph":
            height = float(parts[3]) * 72
        elif parts[0] == "node":
            raw_pos[by_name[parts[1]]] = (float(parts[2]) * 72, float(parts[3]) * 72)
        elif parts[0] == "edge":
            u, v, k = by_name[parts[1]], by_name[parts[2]], int(parts[3])
            pts = [(float(parts[4 + 2 * i]) * 72, float(parts[5 + 2 * i]) * 72) for i in range(k)]
            raw_edges[(u, v)] = [(x, height - y) for x, y in pts]
    pos = {v: (x, height - y) for v, (x, y) in raw_pos.items()}
    ranks = sorted({round(y, 1) for _, y in pos.values()})
    rank_of = {y: i for i, y in enumerate(ranks)}
    layer = {v: rank_of[round(y, 1)] for v, (_, y) in pos.items()}
    width = max((x + size[v][0] / 2 for v, (x, _) in pos.items()), default=0.0)
    edges = {e: raw_edges.get(e, [pos[e[0]], pos[e[1]]]) for e in edge_list}
    return Layout(pos, dict(size), edges, layer, width, height)


def layout_with_graphviz(graph: nx.DiGraph, options: LayoutOptions | None = None,
                         timeout: float | None = 120.0,
                         sizes: Mapping[Hashable, tuple[float, float]] | None = None,
                         clusters: bool = False) -> Layout:
    """The same ``Layout`` computed by Graphviz ``dot`` (optional, slow)."""
    return graphviz_layout(graph, options or LayoutOptions(), timeout, box_sizes(graph, list(graph.nodes), sizes),
                           clusters)
