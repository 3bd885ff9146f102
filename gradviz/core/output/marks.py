"""Diagnosis marks drawn on a graph: cut edges and node badges (no Qt).

The window draws them when the health check runs; ``gradviz export --check`` draws the
same ones, so a picture of a broken model shows what is broken. Each style has the one
sentence the legend prints for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import networkx as nx

__all__ = ["EDGE_STYLES", "NODE_STYLES", "Marks", "anchor_cuts", "finding_nodes", "marks_from_findings"]

# style -> what the legend says. Edges are drawn dashed in the style's colour; nodes get a round badge.
EDGE_STYLES = {
    "broken": "cut edge: no gradient flows back along it",
    "cut-branch": "cut branch: computed, but the loss never reaches it",   # graph marks (views)
}
NODE_STYLES = {
    "nan-origin": "where NaN/Inf first appears",
    "error": "error found by the health check",
    "warning": "warning from the health check",
    "info": "note from the health check",
    "dead": "dead unit",
    "failed": "the call that raised: the forward stopped here",          # graph marks (views)
}


@dataclass
class Marks:
    """Marked edges and nodes by style; ids are those of the graph they were found on."""

    edges: dict[str, list[tuple[Any, Any]]] = field(default_factory=dict)
    nodes: dict[str, list[Any]] = field(default_factory=dict)

    def add_edges(self, style: str, edges: Iterable[tuple[Any, Any]]) -> None:
        have = self.edges.setdefault(style, [])
        have.extend(e for e in (tuple(e) for e in edges) if e not in have)

    def add_nodes(self, style: str, ids: Iterable[Any]) -> None:
        have = self.nodes.setdefault(style, [])
        have.extend(n for n in ids if n not in have)

    def __bool__(self) -> bool:
        return any(self.edges.values()) or any(self.nodes.values())

    def counts(self) -> dict[str, int]:
        """style -> number of marks, only styles that have any."""
        out = {s: len(v) for s, v in self.edges.items() if v}
        out.update({s: len(v) for s, v in self.nodes.items() if v})
        return out

    def styles(self) -> list[str]:
        """The styles that have marks, edge styles first."""
        return list(self.counts())

    def on_view(self, view: nx.DiGraph) -> "Marks":
        """The marks moved onto a collapsed view: a group box stands for its members;
        marks whose ends are hidden or fall in one box are dropped."""
        box: dict[Any, Any] = {}
        for gid, attrs in view.nodes(data=True):
            if attrs.get("kind") == "group":
                for member in attrs.get("members", ()):
                    box[member] = gid

        def shown(nid: Any) -> Any:
            return nid if nid in view else box.get(nid)

        out = Marks()
        for style, edges in self.edges.items():
            pairs = ((shown(u), shown(v)) for u, v in edges)
            out.add_edges(style, [(a, b) for a, b in pairs if a is not None and b is not None and a != b])
        for style, ids in self.nodes.items():
            out.add_nodes(style, [n for n in map(shown, ids) if n is not None])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"edges": {s: [list(e) for e in v] for s, v in self.edges.items() if v},
                "nodes": {s: list(v) for s, v in self.nodes.items() if v}}


def anchor_cuts(edges: Iterable[Any], graph: Any = None) -> list[tuple[str, str]]:
    """Broken edges drawn from the op that cut them: the checklist names a cut by the last thing
    behind it (``param:encoder.2.bias -> op:2``); a traced graph with cut branches has the cut
    itself (``cut:0``, the ``.detach()`` call) feeding that consumer, so the edge starts there."""
    cuts = (graph.graph.get("cut_branches") or []) if graph is not None else []
    out = []
    for u, v in (tuple(e) for e in edges):
        for cut in cuts:
            if cut.get("consumer") == v and (u in cut.get("nodes", ()) or u == cut.get("node")):
                u = cut["node"]
                break
        out.append((u, v))
    return list(dict.fromkeys(out))


def finding_nodes(finding: dict, graph: Any = None) -> list[str]:
    """The nodes a click on a finding brightens: those it names and both ends of its cut edges."""
    ids = list(finding.get("nodes") or [])
    for u, v in anchor_cuts(finding.get("edges") or [], graph):
        ids += [u, v]
    return list(dict.fromkeys(ids))


def marks_from_findings(findings: Iterable[Any], graph: Any = None) -> Marks:
    """What the health check draws: cut edges ('broken', from the cut op when ``graph`` has it:
    ``anchor_cuts``), NaN/Inf origins ('nan-origin'), and a badge of the finding's severity on
    the nodes each finding names (the nodes a click selects).

    ``findings``: ``Finding`` objects or their ``to_dict()`` form.
    """
    marks = Marks()
    for f in findings:
        d = f if isinstance(f, dict) else f.to_dict()
        marks.add_edges("broken", anchor_cuts(d.get("edges") or [], graph))
        marks.add_nodes("nan-origin", (d.get("data") or {}).get("nan_origin") or [])
        if d.get("severity") in NODE_STYLES:
            marks.add_nodes(d["severity"], d.get("nodes") or [])
    origins = set(marks.nodes.get("nan-origin", ()))
    for severity in ("error", "warning", "info"):  # a NaN origin already has its own badge
        if severity in marks.nodes:
            marks.nodes[severity] = [n for n in marks.nodes[severity] if n not in origins]
    return marks
