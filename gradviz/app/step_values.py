"""What every view shows of a node: its numbers at the document's current step, and which step.

A traced graph's node attributes are the numbers of the traced step (step 0); training and
run files bring other steps (``Document.norms`` / ``norms_step`` / ``step_nodes``). A view
never reads ``grad_*``/``value_*`` from the graph directly: it asks ``node_now(doc, nid)``,
which gives the node's attributes with the numbers of the current step only — the traced
ones while the document is at its traced step; else the step's norm and, when they were
measured, its full statistics; nothing of another step. ``state`` says what is known:
``"current"`` (everything the node has at this step), ``"norm"`` (the norm only: the rest
is being computed, or can be on request), ``"none"`` (no number of this step). Group and
fold boxes get their norms, per-repeat norms and members' norms of the same step.

Plain Python, no Qt: the Inspector, the fold boxes' sparklines, the module tree, the
report of ``--report`` and the model-based test all read the same answer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gradviz.core.trace.modules import ModuleNorms

NUMBER_PREFIXES = ("grad_", "value_")


@dataclass
class NodeNow:
    attrs: dict             # the node's attributes, numbers of ``step`` only
    step: int | None        # the step of those numbers (None: not known)
    state: str              # current | norm | none
    source: str             # traced | training | recorded | live


def step_text(step: int | None, source: str = "") -> str:
    """How a view names the step of its numbers: "step 2,708" ("traced, step 0")."""
    if step is None:
        return "step not known"
    text = f"step {step:,}"
    return f"traced, {text}" if source == "traced" else text


def _without_numbers(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if not k.startswith(NUMBER_PREFIXES) and k != "details_error"
            and k != "saved_stats"}


def module_norms(doc) -> ModuleNorms:
    """The document's ``ModuleNorms`` (made once per graph)."""
    key = id(doc.graph)
    cached = doc.parts.get("_module_norms")
    if cached is None or cached[0] != key:
        cached = (key, ModuleNorms(doc.modules, doc.graph))
        doc.parts["_module_norms"] = cached
    return cached[1]


def module_norms_now(doc) -> dict[str, float | None]:
    """{module path: gradient norm} at the current step."""
    if doc.graph is None:
        return {}
    live = doc.norms if doc.norms_source != "traced" else None
    return module_norms(doc).compute(live)[0]


def node_now(doc, nid: str, modules: dict | None = None) -> NodeNow:
    """Node ``nid`` (a view or full-graph id) with the numbers of the document's current step
    (``modules``: ``module_norms_now(doc)`` when the caller has it already)."""
    base = doc.node(nid)
    step, source = doc.step, doc.norms_source
    if not base:
        return NodeNow({}, step, "none", source)
    if source == "traced":
        attrs = dict(base)
        state = "current" if attrs.get("grad_norm") is not None or attrs.get("grad_numel") is not None else "none"
        if attrs.get("kind") != "group" and attrs.get("grad_norm") is not None and attrs.get("grad_mean") is None:
            state = "norm"            # a fast trace's node: its details are replayed on demand
        return NodeNow(attrs, step, state, source)
    attrs = _without_numbers(base)
    if base.get("kind") == "loss":        # the loss node's value is the loss of the step shown
        attrs["value"], attrs["value_step"] = doc.live_loss, doc.loss_step
    if base.get("kind") == "group":
        return _group_now(doc, attrs, step, source, modules)
    fresh = doc.step_nodes.get(nid)
    if fresh is not None:
        attrs.update(fresh)
        return NodeNow(attrs, step, "current", source)
    if nid in doc.norms:
        attrs["grad_norm"] = doc.norms[nid]
        if attrs["grad_norm"] is None:
            return NodeNow(attrs, step, "current", source)      # no gradient flowed at this step
        return NodeNow(attrs, step, "norm", source)
    return NodeNow(attrs, step, "none", source)


def _group_now(doc, attrs: dict, step, source, modules: dict | None) -> NodeNow:
    modules = module_norms_now(doc) if modules is None else modules
    if attrs.get("fold"):
        repeats = attrs.get("repeats") or []
        per = [modules.get(p) for p in repeats]
        attrs["repeat_norms"] = per
        params = [p for p in repeats if doc.modules.get(p, {}).get("numel")]
        known = [modules.get(p) for p in params if modules.get(p) is not None]
        if known:
            norm = math.sqrt(math.fsum(v * v for v in known))
        else:
            finite = [v for v in per if v is not None and math.isfinite(v)]
            norm = max(finite) if finite else None
    else:
        norm = modules.get(attrs.get("module", ""))
    attrs["grad_norm"] = norm
    return NodeNow(attrs, step, "current" if norm is not None else "none", source)


def member_norm(doc, member: str) -> float | None:
    """A group member's norm at the current step."""
    if doc.norms_source != "traced":
        return doc.norms.get(member)
    return doc.graph.nodes[member].get("grad_norm") if doc.graph is not None and member in doc.graph else None


def refresh_folds(doc) -> list[str]:
    """Put the current step's per-repeat norms into the view's fold boxes (what their sparklines
    draw); the fold ids changed."""
    if doc.view is None:
        return []
    changed = []
    folds = [(fid, a) for fid, a in doc.view.nodes(data=True) if a.get("fold")]
    modules = module_norms_now(doc) if folds and doc.norms_source != "traced" else None   # once for all folds
    for fid, a in folds:
        now = node_now(doc, fid, modules).attrs
        if a.get("repeat_norms") != now.get("repeat_norms"):
            a["repeat_norms"] = now.get("repeat_norms")
            changed.append(fid)
    return changed
