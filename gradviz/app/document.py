"""The open script and what the window shows of it. Plain Python: no widgets, no Qt.

``graph`` is the full traced graph (never modified by the window); ``view`` is the
collapsed graph on screen (``grouping.collapse(graph, expanded=expanded)``) and
``layout`` its layout. Extensions read ``path``, ``graph`` and ``run``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

from gradviz.core.grouping import group_of
from gradviz.core.modules import prefixes


@dataclass
class TraceResult:
    """What a trace job hands back to the window (plain Python objects only)."""

    path: Path
    graph: nx.DiGraph
    expanded: set[str]
    view: nx.DiGraph
    layout: Any
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class ViewResult:
    """What a re-collapse/re-layout job hands back."""

    expanded: set[str]
    view: nx.DiGraph
    layout: Any
    seconds: float = 0.0


class Document:
    def __init__(self) -> None:
        self.path: Path | None = None          # the script last asked for (Reload reloads it)
        self.graph_path: Path | None = None    # the script the shown graph came from
        self.graph: nx.DiGraph | None = None
        self.view: nx.DiGraph | None = None
        self.layout: Any = None
        self.expanded: set[str] = set()
        self.run: dict[str, Any] = {}
        self.norms: dict[str, float | None] = {}      # live norms set by extensions (full-graph ids)
        self.live_loss: float | None = None           # the loss of the live / recorded step shown
        self.marked_edges: dict[str, list[tuple[str, str]]] = {}
        self.marked_nodes: dict[str, list[str]] = {}
        self._order: dict[str, int] | None = None
        self._range: tuple[float, float] | None = None
        self.fixed_range: tuple[float, float] | None = None   # set by the user; None = follow the data

    # -- state changes ------------------------------------------------------
    def set_trace(self, result: TraceResult) -> None:
        self.graph_path = result.path
        self.graph = result.graph
        self.expanded = set(result.expanded)
        self.view = result.view
        self.layout = result.layout
        self.norms = {}
        self.live_loss = None
        self.marked_edges = {}
        self.marked_nodes = {}
        self._order = None
        self._range = None
        g = result.graph
        self.run = {
            "script": str(result.path), "device": g.graph.get("device"), "step": g.graph.get("step"),
            "loss": g.graph.get("loss"), "nodes": g.number_of_nodes(), "edges": g.number_of_edges(),
            "trace_seconds": g.graph.get("trace_seconds"), **{f"{k}_seconds": v for k, v in result.timings.items()},
        }

    def set_view(self, result: ViewResult) -> None:
        self.expanded = set(result.expanded)
        self.view = result.view
        self.layout = result.layout

    # -- questions ----------------------------------------------------------
    @property
    def modules(self) -> dict[str, dict]:
        return self.graph.graph.get("modules", {}) if self.graph is not None else {}

    def update_node_stats(self, nid: str, grad: dict | None, value: dict | None = None) -> bool:
        """New gradient (and value) statistics for a node, e.g. from a training step;
        False when the node is unknown. The full graph and the shown view both follow."""
        from gradviz.core.stats import prefixed

        if self.graph is None or nid not in self.graph:
            return False
        fresh = prefixed(grad, "grad")
        if value is not None:
            fresh.update(prefixed(value, "value"))
        self.graph.nodes[nid].update(fresh)
        if self.view is not None and nid in self.view:
            self.view.nodes[nid].update(fresh)
        self.norms[nid] = fresh["grad_norm"]
        return True

    def node(self, nid: str) -> dict:
        """Attributes of a view node or, failing that, a full-graph node ({} if unknown)."""
        if self.view is not None and nid in self.view:
            return self.view.nodes[nid]
        if self.graph is not None and nid in self.graph:
            return self.graph.nodes[nid]
        return {}

    def visible_id(self, nid: str) -> str | None:
        """The node on screen that stands for ``nid`` (itself, or the group holding it)."""
        if self.view is None:
            return None
        if nid in self.view:
            return nid
        if nid.startswith("group:"):
            box = group_of(nid[len("group:"):], self.expanded)
            return f"group:{box}" if box else None
        if self.graph is None or nid not in self.graph:
            return None
        attrs = self.graph.nodes[nid]
        if attrs.get("kind") in ("loss", "input"):
            return nid if nid in self.view else None
        box = group_of(attrs.get("module", ""), self.expanded)
        gid = f"group:{box}" if box else nid
        return gid if gid in self.view else None

    def expanded_to_show(self, nid: str) -> set[str]:
        """``expanded`` plus the modules that must open for ``nid`` to be drawn on its own."""
        if nid.startswith("group:"):
            module = nid[len("group:"):]
            return self.expanded | set(prefixes(module)[:-1])
        attrs = self.graph.nodes[nid] if self.graph is not None and nid in self.graph else {}
        return self.expanded | set(prefixes(attrs.get("module", "")))

    def expanded_with(self, module: str) -> set[str]:
        return self.expanded | set(prefixes(module))

    def expanded_without(self, module: str) -> set[str]:
        """Collapse ``module`` (its inner modules keep their state for the next expand)."""
        return self.expanded - {module}

    def parent_module(self, nid: str) -> str | None:
        """The innermost expanded module holding a view node: what "Collapse parent" folds."""
        attrs = self.node(nid)
        if not attrs:
            return None
        if attrs.get("kind") == "group":
            module = attrs.get("module", "")
            parent = module.rpartition(".")[0]
            return parent or None
        module = attrs.get("module", "")
        return module or None

    def all_modules(self) -> set[str]:
        return {p for p in self.modules if p}

    def order(self) -> dict[str, int]:
        """Full-graph node id -> place in data-flow order (inputs first): search order."""
        if self._order is None and self.graph is not None:
            try:
                seq = list(nx.topological_sort(self.graph))
            except nx.NetworkXUnfeasible:
                seq = list(self.graph.nodes)
            self._order = {n: i for i, n in enumerate(seq)}
        return self._order or {}

    def norm_range(self) -> tuple[float, float] | None:
        """The colour range: ``colors.auto_range`` of the full graph's gradient norms."""
        if self.graph is None:
            return None
        if self._range is not None:
            return self._range
        from gradviz.core.colors import auto_range

        values = [a.get("grad_norm") for _, a in self.graph.nodes(data=True) if a.get("kind") != "loss"]
        values = [v for v in values if v is not None and math.isfinite(v) and v > 0]
        if not values:
            return None
        self._range = auto_range(values)
        return self._range

    def view_norms(self, norms: dict[str, float | None]) -> dict[str, float | None]:
        """Live norms of full-graph nodes mapped onto the view: groups get the norm of their
        parameters (or the largest norm among their members when they have none)."""
        if self.view is None:
            return {}
        out: dict[str, float | None] = {}
        for nid, value in norms.items():
            if nid in self.view:
                out[nid] = value
        for gid, attrs in self.view.nodes(data=True):
            if attrs.get("kind") != "group":
                continue
            members = [m for m in attrs.get("members", ()) if m in norms]
            if not members:
                continue
            params = [norms[m] for m in members if m.startswith("param:")]
            if params:
                if any(v is not None and not math.isfinite(v) for v in params):
                    out[gid] = float("nan")
                else:
                    known = [v for v in params if v is not None]
                    out[gid] = math.sqrt(sum(v * v for v in known)) if known else None
            else:
                known = [norms[m] for m in members if norms[m] is not None]
                out[gid] = max(known) if known else None
        return out

    def view_edges(self, edges: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Edges mapped onto the visible nodes (group boxes stand for their members).

        Pairs the view has no edge for are kept: a broken edge is by definition one
        autograd never recorded, and the scene draws it straight between the boxes."""
        out = []
        for u, v in edges:
            a, b = self.visible_id(u), self.visible_id(v)
            if a and b and a != b:
                out.append((a, b))
        return list(dict.fromkeys(out))

    def view_nodes(self, ids: list[str]) -> list[str]:
        out = [self.visible_id(n) for n in ids]
        return list(dict.fromkeys(n for n in out if n))
