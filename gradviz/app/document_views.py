"""How a document's full-graph ids map onto the view on screen: which box stands for a node,
live norms and marked edges mapped onto boxes. A mixin of ``Document`` (``document.py``): it
reads the document's ``graph``, ``view`` and ``expanded``. No Qt."""
from __future__ import annotations

import math

from gradviz.core.layout.grouping import group_of


class ViewMapping:
    def visible_id(self, nid: str) -> str | None:
        """The node on screen that stands for ``nid`` (itself, or the group holding it)."""
        if self.view is None:
            return None
        if nid in self.view:
            return nid
        if nid.startswith("group:"):
            box = group_of(nid[len("group:"):], self.expanded)
            gid = self._box_id(box) if box else None
            return gid if gid in self.view else None      # (a module the graph does not have: none)
        if self.graph is None or nid not in self.graph:
            return None
        attrs = self.graph.nodes[nid]
        if attrs.get("kind") in ("loss", "input"):
            return nid if nid in self.view else None
        box = group_of(attrs.get("module", ""), self.expanded)
        gid = self._box_id(box) if box else nid
        return gid if gid in self.view else None

    def _box_id(self, box: str) -> str:
        """The view node drawing module ``box``: its group, or the fold of repeats holding it."""
        return self.view.graph.get("fold_of", {}).get(box) or f"group:{box}"


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
