"""The open document: one script (or run file) and everything the window derived from it.

Plain Python, no widgets, no Qt. A new ``Document`` is made each time a script or run is
opened or reloaded; the window replaces the old one as a whole, so a graph, findings,
gradcheck rows, live norms, marks or a selection can never outlive the script they came
from or land in the next one.

The document tells one listener (the window, while it is the current document) what
changed: ``"status"``, ``"graph"`` (a new full graph), ``"view"`` (a new grouping and
layout on screen), ``"norms"``, ``"loss"``, ``"marks"``, ``"selection"``, ``"stats"``,
``"findings"``, ``"gradcheck"``, ``"range"``, ``"part"``. A document that is no longer
current has no listener: whatever a late worker or a stale panel writes into it is never
shown. Panels keep their own per-document state in ``parts`` (``part(name, factory)``).

``graph`` is the full traced graph (never modified by the window); ``view`` is the
collapsed graph on screen (``grouping.collapse(graph, expanded=expanded)``) and
``layout`` its layout.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import networkx as nx

from gradviz.app.document_views import ViewMapping
from gradviz.core.trace.modules import prefixes

Listener = Callable[["Document", str, dict], None]
STATUSES = ("empty", "loading", "ready", "failed")


@dataclass
class TraceResult:
    """What a trace job hands back to the window (plain Python objects only)."""

    path: Path
    graph: nx.DiGraph
    expanded: set[str]
    view: nx.DiGraph
    layout: Any
    timings: dict[str, float] = field(default_factory=dict)
    findings: dict | None = None     # the check report, when the trace met NaN/inf (see app/explain.py)


@dataclass
class ViewResult:
    """What a re-collapse/re-layout job hands back."""

    expanded: set[str]
    view: nx.DiGraph
    layout: Any
    seconds: float = 0.0


class Document(ViewMapping):
    _serials = itertools.count(1)

    def __init__(self, path: str | Path | None = None, kind: str = "script") -> None:
        self.serial = next(Document._serials)       # tells documents apart in logs and tests
        self.path: Path | None = Path(path) if path is not None else None
        self.kind = kind if path is not None else "empty"     # "script" | "run" | "empty"
        self.status = "loading" if path is not None else "empty"
        self.error: BaseException | str | None = None
        self.error_details = ""
        self.graph: nx.DiGraph | None = None
        self.view: nx.DiGraph | None = None
        self.layout: Any = None
        self.expanded: set[str] = set()
        self.run: dict[str, Any] = {}
        self.norms: dict[str, float | None] = {}      # live norms (full-graph ids): training, a run step
        self.live_loss: float | None = None           # the loss of the live / recorded step shown
        self.loss_step: int | None = None             # ...and its step (None: not known)
        self.norms_source = "traced"                  # where the norms shown come from: traced | training | recorded
        self.norms_step: int | None = None            # ...and their step (None: not known)
        # the statistics computed for nodes at the step of the norms (``app/step_values.py``): a node's
        # traced attributes are step 0's and never shown as another step's
        self.step_nodes: dict[str, dict] = {}
        self.model_step: int | None = None            # the step the live model stands at (training), if any
        self.recompute: Callable[[str], bool] | None = None   # asks for a node's numbers at model_step
        self.marked_edges: dict[str, list[tuple[str, str]]] = {}
        self.marked_nodes: dict[str, list[str]] = {}
        self.fixed_range: tuple[float, float] | None = None   # set by the user; None = follow the data
        self.selected = ""                            # the view node in focus ('' = none)
        self.findings: dict | None = None             # the health-check report of this document
        self.gradcheck: dict | None = None            # the gradient-check report of this document
        self.parts: dict[str, Any] = {}               # per-document state of panels (see ``part``)
        self._order: dict[str, int] | None = None
        self._range: tuple[float, float] | None = None
        self._listener: Listener | None = None

    def __repr__(self) -> str:
        return f"<Document #{self.serial} {self.kind} {self.path.name if self.path else '-'} {self.status}>"

    @property
    def name(self) -> str:
        return self.path.name if self.path is not None else ""

    # -- observing -------------------------------------------------------------
    def listen(self, listener: Listener | None) -> None:
        """The one listener told of every change (the window, while this document is current)."""
        self._listener = listener

    def _changed(self, what: str, **info) -> None:
        if self._listener is not None:
            self._listener(self, what, info)

    def part(self, name: str, factory: Callable[[], Any]) -> Any:
        """A panel's state for this document, made by ``factory()`` on first use."""
        if name not in self.parts:
            self.parts[name] = factory()
        return self.parts[name]

    def set_part(self, name: str, value: Any) -> None:
        self.parts[name] = value
        self._changed("part", name=name)

    # -- opening ---------------------------------------------------------------
    def fail(self, error: BaseException | str, details: str = "") -> None:
        """Opening failed: nothing of the script is known (a previous graph is not kept)."""
        self.status = "failed"
        self.error, self.error_details = error, details
        self._changed("status")

    def set_graph(self, graph: nx.DiGraph, timings: dict[str, float] | None = None) -> None:
        """A new full graph: what was derived from the previous one (norms, marks, selection) goes."""
        self.graph = graph
        self.view = self.layout = None
        self.norms, self.live_loss, self.loss_step = {}, None, None
        self.norms_source, self.norms_step = "traced", None
        self.step_nodes, self.model_step = {}, None
        self.marked_edges, self.marked_nodes = {}, {}
        self.selected = ""
        self._order = self._range = None
        g = graph
        self.run = {
            "script": str(self.path) if self.path else g.graph.get("script"), "device": g.graph.get("device"),
            "step": g.graph.get("step"), "loss": g.graph.get("loss"), "nodes": g.number_of_nodes(),
            "edges": g.number_of_edges(), "trace_seconds": g.graph.get("trace_seconds"),
            **{f"{k}_seconds": v for k, v in (timings or {}).items()}, **self.run_extra(),
        }
        self._changed("graph")

    def run_extra(self) -> dict:
        """Facts about a run file kept across its graphs (``run_file``, ``ranks``, ``steps``)."""
        return {k: v for k, v in self.run.items() if k in ("run_file", "ranks", "steps")}

    def set_trace(self, result: TraceResult) -> None:
        """A finished trace: the full graph and its first view, shown fitted."""
        self.set_graph(result.graph, result.timings)
        self.set_view(ViewResult(result.expanded, result.view, result.layout), fit=True)
        if result.findings is not None:
            self.set_findings(result.findings)

    def set_view(self, result: ViewResult, fit: bool = False) -> None:
        if not (self.graph is not None and self.graph.graph.get("partial")):
            self.status = "ready"     # the graph of a failing forward is shown, but the script still failed
        self.expanded = set(result.expanded)
        self.view = result.view
        self.layout = result.layout
        self._changed("view", fit=fit)

    # -- what panels and extensions set ---------------------------------------------
    def select(self, ids: list[str], center: bool = True) -> None:
        """Select nodes (full-graph or view ids; the boxes standing for them are selected)."""
        self._changed("selection", ids=list(ids), center=center)

    def set_norms(self, norms: dict[str, float | None], step: int | None = None, source: str = "live") -> None:
        """Live gradient norms (full-graph ids) from ``step`` of ``source`` ('training', 'recorded')."""
        if step != self.norms_step or source != self.norms_source:
            self.step_nodes = {}      # statistics of another step are not this one's
        self.norms.update(norms)
        self.norms_source, self.norms_step = source, step
        self._changed("norms", norms=dict(norms))

    def set_step_values(self, values: dict, source: str = "training") -> None:
        """Every number of one step at once (``core/train/step_probe.probe_step``): its norms
        (all nodes), loss and the full statistics of the nodes it measured."""
        from gradviz.core.stats.tensors import prefixed

        step = values["step"]
        self.step_nodes = {}
        self.norms = dict(values.get("norms") or {})
        self.norms_source, self.norms_step = source, step
        for nid, entry in (values.get("nodes") or {}).items():
            fresh = prefixed(entry.get("grad"), "grad")
            if entry.get("value") is not None:
                fresh.update(prefixed(entry["value"], "value"))
            self.step_nodes[nid] = fresh
        self.live_loss, self.loss_step = values.get("loss"), step
        self._changed("norms", norms=dict(self.norms))
        self._changed("loss")
        self._changed("stats", nid=self.selected)

    def set_model_step(self, step: int | None) -> None:
        """The step the live model stands at (None: no live model)."""
        if step != self.model_step:
            self.model_step = step
            self._changed("model-step")

    @property
    def step(self) -> int | None:
        """The step of the numbers shown: the traced step until training or a run gives others."""
        if self.norms_source == "traced":
            return self.graph.graph.get("step") if self.graph is not None else None
        return self.norms_step

    def set_loss(self, value: float, step: int | None = None) -> None:
        self.live_loss, self.loss_step = value, step
        self._changed("loss")

    def mark_edges(self, edges: list[tuple[str, str]], style: str = "broken") -> None:
        known = self.marked_edges.setdefault(style, [])
        known.extend(e for e in (tuple(e) for e in edges) if e not in known)
        self._changed("marks")

    def mark_nodes(self, ids: list[str], style: str = "nan-origin") -> None:
        known = self.marked_nodes.setdefault(style, [])
        known.extend(n for n in ids if n not in known)
        self._changed("marks")

    def set_findings(self, report: dict | None) -> None:
        self.findings = report
        self._changed("findings")

    def set_gradcheck(self, report: dict | None) -> None:
        self.gradcheck = report
        self._changed("gradcheck")

    def set_fixed_range(self, rng: tuple[float, float] | None) -> None:
        self.fixed_range = rng
        self._changed("range")

    def update_node_stats(self, nid: str, grad: dict | None, value: dict | None = None,
                          step: int | None = None) -> bool:
        """New gradient (and value) statistics for a node at ``step`` (e.g. a sampled training
        step); False when the node is unknown. They are the step's (``step_nodes``): the traced
        graph keeps its own."""
        from gradviz.core.stats.tensors import prefixed

        if self.graph is None or nid not in self.graph:
            return False
        fresh = prefixed(grad, "grad")
        if value is not None:
            fresh.update(prefixed(value, "value"))
        if step is not None and (step != self.norms_step or self.norms_source == "traced"):
            self.step_nodes = {}
            self.norms_step, self.norms_source = step, "training"
        self.step_nodes[nid] = fresh          # the traced graph keeps step 0's numbers
        self.norms[nid] = fresh["grad_norm"]
        self._changed("stats", nid=nid)
        return True

    def set_details(self, nid: str, attrs: dict) -> bool:
        """Statistics computed on demand for a node (``app/details_fetcher.py``): the same
        step's values, so the norms and colours do not change; the inspector follows."""
        if self.graph is None or nid not in self.graph:
            return False
        if self.norms_source != "traced":
            return False              # the replay is of the traced step: never another step's numbers
        self.graph.nodes[nid].update(attrs)
        if self.view is not None and nid in self.view:
            self.view.nodes[nid].update(attrs)
        self._changed("stats", nid=nid)
        return True

    # -- questions ----------------------------------------------------------
    @property
    def modules(self) -> dict[str, dict]:
        return self.graph.graph.get("modules", {}) if self.graph is not None else {}

    def node(self, nid: str) -> dict:
        """Attributes of a view node or, failing that, a full-graph node ({} if unknown)."""
        if self.view is not None and nid in self.view:
            return self.view.nodes[nid]
        if self.graph is not None and nid in self.graph:
            return self.graph.nodes[nid]
        return {}

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
        """Collapse ``module`` and every module inside it: a folded box holds nothing open
        (the module tree's check boxes then say what the graph shows)."""
        return {m for m in self.expanded if m != module and not m.startswith(module + ".")}

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
        from gradviz.core.output.colors import auto_range

        values = [a.get("grad_norm") for _, a in self.graph.nodes(data=True) if a.get("kind") != "loss"]
        values = [v for v in values if v is not None and math.isfinite(v) and v > 0]
        if not values:
            return None
        self._range = auto_range(values)
        return self._range
