"""The automatic view: which modules to open so the first picture of a model is readable.

One function for every place a graph is first shown — ``gradviz export --collapse auto``,
the window's first view and notebooks — so they agree. A fixed module depth does not
work on real models: transformers' GPT-2 has its blocks at depth 3 and their insides at
depth 4, a ResNet's bottlenecks sit at depth 5 with their convolutions at 7, and one
depth for all either spells out twelve blocks or hides every stage. So the view is
grown from the overview instead:

- start from one box per top-level module (with the user's own expansions, ``keep``);
- runs of repeated blocks stay folded ("GPT2Block × 12", ``core/layout/folding.py``), and a
  container holding nothing but one run opens onto its fold (``grouping.run_containers``);
- closed modules that have submodules are opened one level, level by level down the tree
  and the largest first within a level, while the view stays within ``max_boxes`` items (a
  module that would overflow it stays closed; opening only ever adds items, so it never
  fits later). Level by level keeps siblings alike: the four downsampling layers of a
  ResNet's stages are opened to the same depth, not the two largest to the bottom;
- modules without submodules (a Linear, a LayerNorm) are opened onto their ops only when
  all of them fit at once: a picture that mixes ops and module boxes at one level of the
  tree reads unevenly.

The count of each candidate is worked out from a per-module table built in one pass over
the nodes (own loose nodes, child boxes, runs), not by re-collapsing the graph, so the
choice costs about one ``visible_count``.
"""
from __future__ import annotations

import heapq
from typing import Iterable

import networkx as nx

from gradviz.core.layout.folding import UNFOLD, find_repeats
from gradviz.core.layout.grouping import visible_count
from gradviz.core.trace.modules import prefixes

AUTO_BOXES = 40     # "about 40" items: a screen, or a notebook cell, of readable boxes


class _Tree:
    """The module tree as the graph's nodes see it: per path, its own loose nodes, its child
    paths and its size (nodes at or below it); the runs by parent."""

    def __init__(self, graph: nx.DiGraph) -> None:
        self.own: dict[str, int] = {}
        self.size: dict[str, int] = {}
        self.children: dict[str, list[str]] = {}
        for _, attrs in graph.nodes(data=True):
            if attrs.get("kind") in ("loss", "input"):
                continue
            module = attrs.get("module") or ""
            self.own[module] = self.own.get(module, 0) + 1
            parent = ""
            for q in prefixes(module):
                if q not in self.size:
                    self.size[q] = 0
                    self.children.setdefault(parent, []).append(q)
                self.size[q] += 1
                parent = q
        self.runs: dict[str, list[list[str]]] = {}
        for run in find_repeats(graph):
            self.runs.setdefault(run["parent"], []).append(run["members"])

    def pure_run(self, path: str) -> bool:
        """``path`` holds one run of repeated blocks and nothing else (no ops of its own)."""
        runs = self.runs.get(path, [])
        return (len(runs) == 1 and not self.own.get(path)
                and sorted(runs[0]) == sorted(self.children.get(path, [])))

    def folded(self, parent: str, expanded: set[str]) -> set[str]:
        """Children of an open ``parent`` drawn inside a fold box: consecutive closed repeats."""
        out: set[str] = set()
        for members in self.runs.get(parent, []):
            chunk: list[str] = []
            for m in [*members, None]:
                if m is not None and m not in expanded and UNFOLD + m not in expanded:
                    chunk.append(m)
                    continue
                if len(chunk) >= 2:
                    out.update(chunk)
                chunk = []
        return out

    def items(self, path: str, expanded: set[str]) -> int:
        """How many items an open ``path`` draws: its loose nodes, its closed children (a fold
        counting once) and, recursively, its open children."""
        folded = self.folded(path, expanded)
        n = self.own.get(path, 0) if path else 0
        folds = sum(1 for members in self.runs.get(path, []) if folded & set(members))
        for c in self.children.get(path, []):
            if c in expanded:
                n += self.items(c, expanded)
            elif c not in folded:
                n += 1
        return n + folds


def auto_expanded(graph: nx.DiGraph, max_boxes: int = AUTO_BOXES, keep: Iterable[str] = ()) -> set[str]:
    """The module paths (and ``unfold:`` markers from ``keep``) the automatic view opens.

    ``keep``: expansions the user made, kept as they are (the view grows around them).
    The result, given to ``grouping.collapse(graph, expanded=...)``, draws at most
    ``max_boxes`` items whenever the overview itself does.
    """
    tree = _Tree(graph)
    expanded = set(keep)
    # the root is never a box; containers of one run open onto their fold wherever they show
    folded_top = tree.folded("", expanded)
    expanded |= {c for c in tree.children.get("", []) if tree.pure_run(c) and c not in folded_top}
    count = visible_count(graph, expanded)
    leaves: list[str] = []
    heap: list[tuple[int, int, int, str]] = []
    order = 0

    def offer(parent: str) -> None:
        """Queue the closed, unfolded children of an open ``parent``."""
        nonlocal order
        folded = tree.folded(parent, expanded)
        for c in tree.children.get(parent, []):
            if c in expanded:
                if all(q in expanded for q in prefixes(c)):
                    offer(c)
                continue
            if c in folded:
                continue
            order += 1
            if tree.children.get(c):
                heapq.heappush(heap, (c.count("."), -tree.size[c], order, c))
            else:
                leaves.append(c)

    offer("")
    while heap:
        *_, path = heapq.heappop(heap)
        # a child holding one run opens onto its fold (one box either way), unless it is itself a
        # repeat folded at this level (a run of such containers stays one fold)
        folded_here = tree.folded(path, expanded | {path})
        opened = {path} | {c for c in tree.children.get(path, []) if tree.pure_run(c) and c not in folded_here}
        trial = expanded | opened
        new = count - 1 + tree.items(path, trial)
        if new <= max_boxes:
            expanded, count = trial, new
            offer(path)
    if leaves:
        trial = expanded | set(leaves)
        new = count - len(leaves) + sum(tree.items(p, trial) for p in leaves)
        if new <= max_boxes:
            expanded = trial
    return expanded


def expanded_for(graph: nx.DiGraph, collapse: object) -> set[str] | None:
    """What a ``collapse`` setting opens: None (nothing collapsed: None), ``"auto"`` (the
    automatic view, ``auto_expanded``) or a module depth (``grouping.expanded_to_depth``).
    ValueError on anything else — the export command, notebooks and the window read it alike."""
    if collapse is None or collapse is False:
        return None
    if collapse == "auto":
        return auto_expanded(graph)
    if isinstance(collapse, str) and collapse.strip().isdigit():
        collapse = int(collapse)
    if isinstance(collapse, bool) or not isinstance(collapse, int) or collapse < 0:
        raise ValueError(f"collapse is a module depth (0, 1, 2 ...), 'auto' or None, not {collapse!r}")
    from gradviz.core.layout.grouping import expanded_to_depth
    return expanded_to_depth(graph, max(collapse, 1))
