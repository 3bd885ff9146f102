"""Write a traced graph as data: JSON (node-link), GraphML and Graphviz DOT. No Qt.

These are the data rows of the export table (``gradviz.render.export.formats.FORMATS``, which
also holds the image formats drawn by ``gradviz.render``). Diagnosis marks travel with
the graph (``graph.graph["marks"]``, see ``core.marks``): JSON and GraphML carry them as
data, DOT draws them (cut edges red dashed, marked nodes with a red outline and "!").
Every writer goes through ``atomic_write``: a crash or a full disk never leaves a
half-written file in place of a good one.
"""
from __future__ import annotations

import json
import os
from typing import Any

import networkx as nx
import numpy as np

from gradviz.core.runtime.atomic import ExportError, atomic_write  # noqa: F401  (re-exported)
from gradviz.core.output.colors import LogColorScale, auto_range, text_color_for, to_hex
from gradviz.core.runtime.formatting import json_safe, number, shape_text

REQUIRED_NODE_KEYS = ("kind", "shape", "grad_norm")

__all__ = ["ExportError", "to_node_link", "write_json", "write_graphml", "write_dot", "dot_source",
           "atomic_write"]


# -- JSON node-link ------------------------------------------------------------------

def to_node_link(graph: nx.DiGraph) -> dict:
    """networkx node-link data (``edges`` key, as networkx 3.4+ writes it), JSON-safe.

    Every node has ``kind``, ``shape`` and ``grad_norm`` (None when absent), and
    parameters ``param``, so readers need no ``.get`` dance.
    """
    nodes = []
    for nid, attrs in graph.nodes(data=True):
        entry = {"id": json_safe(nid), **{k: json_safe(v) for k, v in attrs.items() if k != "id"}}
        for key in REQUIRED_NODE_KEYS:
            entry.setdefault(key, None)
        if entry["kind"] == "param":
            entry.setdefault("param", str(nid).partition(":")[2] or str(nid))
        nodes.append(entry)
    edges = [{"source": json_safe(u), "target": json_safe(v), **{k: json_safe(x) for k, x in attrs.items()
                                                                  if k not in ("source", "target")}}
             for u, v, attrs in graph.edges(data=True)]
    return {"directed": graph.is_directed(), "multigraph": graph.is_multigraph(),
            "graph": json_safe(dict(graph.graph)), "nodes": nodes, "edges": edges}


def write_json(graph: nx.DiGraph, path: str | os.PathLike) -> None:
    data = to_node_link(graph)

    def writer(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
    atomic_write(path, writer)


# -- GraphML ---------------------------------------------------------------------------

def _graphml_value(value: Any) -> Any:
    """A GraphML scalar, or None to leave the attribute out (GraphML has no null)."""
    if value is None:
        return None
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)  # GraphML doubles accept NaN and INF
    return json.dumps(json_safe(value), separators=(",", ":"))


def _graphml_graph(graph: nx.DiGraph) -> nx.DiGraph:
    out = nx.DiGraph()
    for key, value in graph.graph.items():
        v = _graphml_value(value)
        if v is not None:
            out.graph[key] = v
    for nid, attrs in graph.nodes(data=True):
        out.add_node(str(nid), **{k: v for k, v in ((k, _graphml_value(x)) for k, x in attrs.items())
                                  if v is not None})
    for u, v, attrs in graph.edges(data=True):
        out.add_edge(str(u), str(v), **{k: x for k, x in ((k, _graphml_value(y)) for k, y in attrs.items())
                                        if x is not None})
    # one type per attribute name: an int column that also holds floats becomes float
    for items in (out.nodes.values(), out.edges.values()):
        kinds: dict[str, set] = {}
        for attrs in items:
            for k, v in attrs.items():
                kinds.setdefault(k, set()).add(type(v))
        for attrs in items:
            for k, v in list(attrs.items()):
                types = kinds[k]
                if str in types and not isinstance(v, str):
                    attrs[k] = json.dumps(json_safe(v))  # mixed with text: all text
                elif float in types and not isinstance(v, float):
                    attrs[k] = float(v)  # ints (and bools) beside floats: all floats
    return out


def write_graphml(graph: nx.DiGraph, path: str | os.PathLike) -> None:
    """GraphML with scalar attributes only: lists and dicts become JSON strings."""
    flat = _graphml_graph(graph)
    atomic_write(path, lambda tmp: nx.write_graphml(flat, tmp, infer_numeric_types=True))


# -- Graphviz DOT ----------------------------------------------------------------------

def _q(text: Any) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


_DOT_SHAPES = {
    "param": 'shape=box, style="rounded,filled", penwidth=2.5',
    "input": 'shape=parallelogram, style=filled',
    "leaf": 'shape=parallelogram, style=filled',
    "op": 'shape=box, style=filled',
    "loss": 'shape=doubleoctagon, style=filled',
    "group": 'shape=tab, style=filled, penwidth=1.5',
}


def _dot_label(nid: Any, attrs: dict) -> str:
    kind = attrs.get("kind")
    label = str(attrs.get("label") or nid)
    if kind == "group":
        return f"{attrs.get('module') or label}\n{attrs.get('module_type', '')} · {attrs.get('n_nodes', 0)} nodes"
    if kind in ("param", "input", "leaf"):
        shape = shape_text(attrs.get("shape"))
        return f"{label}\n{shape}" if shape else label
    if kind == "loss" and isinstance(attrs.get("value"), (int, float)):
        return f"{label}\n{number(attrs['value'])}"
    return label


def dot_source(graph: nx.DiGraph, scale: LogColorScale | None = None) -> str:
    """Graphviz source: shapes by kind, fill = gradient colour, edges labelled with shapes,
    diagnosis marks (``graph.graph["marks"]``) in red."""
    norms = [attrs.get("grad_norm") for _, attrs in graph.nodes(data=True)]
    scale = scale or LogColorScale(*auto_range(norms))
    colors = scale.colors_for(norms)
    marks = graph.graph.get("marks") or {}
    marked = {n for ids in (marks.get("nodes") or {}).values() for n in ids}
    lines = ["digraph gradviz {", '  graph [rankdir=TB, fontname="Helvetica", nodesep=0.3, ranksep=0.45];',
             '  node [fontname="Helvetica", fontsize=11, color="#374151", margin="0.12,0.05", height=0.3];',
             '  edge [fontname="Helvetica", fontsize=9, color="#9ca3af", fontcolor="#6b7280", arrowsize=0.6];']
    for (nid, attrs), rgb in zip(graph.nodes(data=True), colors):
        kind = attrs.get("kind", "op")
        style = _DOT_SHAPES.get(kind, _DOT_SHAPES["op"])
        if attrs.get("reachable") is False:
            style = style.replace('style="rounded,filled"', 'style="rounded,filled,dashed"')
            style += ', color="#9ca3af"'
        label = _dot_label(nid, attrs)
        if nid in marked:
            style += ', color="#dc2626", penwidth=3'
            label = "! " + label
        tooltip = attrs.get("op") or attrs.get("module") or ""
        lines.append(f"  {_q(nid)} [label={_q(label)}, {style}, fillcolor={_q(to_hex(rgb))}, "
                     f"fontcolor={_q(to_hex(text_color_for(rgb)))}, tooltip={_q(tooltip)}];")
    for u, v, attrs in graph.edges(data=True):
        label = shape_text(attrs.get("shape"))
        extra = f", label={_q(' ' + label)}" if label and label != "scalar" else ""
        lines.append(f"  {_q(u)} -> {_q(v)} [{extra.lstrip(', ')}];" if extra else f"  {_q(u)} -> {_q(v)};")
    for style_name, edges in (marks.get("edges") or {}).items():
        for u, v in edges:
            lines.append(f'  {_q(u)} -> {_q(v)} [style=dashed, color="#dc2626", penwidth=2, '
                         f'tooltip={_q(style_name)}, constraint=false];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(graph: nx.DiGraph, path: str | os.PathLike) -> None:
    text = dot_source(graph)

    def writer(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    atomic_write(path, writer)

