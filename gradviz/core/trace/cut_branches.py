"""Cut branches drawn: what the loss does not reach, from each cut-off parameter to its cut.

A parameter cut off by ``.detach()``, ``torch.no_grad()``, a numpy round trip, ``.item()``
or ``.data`` appears in the traced graph as a lone grey box. ``add_cut_branches`` reruns
the forward under ``CutTape`` (built exactly as ``trace`` builds it, so the ids of the
traced graph apply) and adds to the graph the computations between those parameters and
the cut, ending at a node for the cut itself — labelled with the call (``.detach()``) and
its ``file:line`` — and, where the forward used the cut's result again, a dashed edge
from the cut to the op of the main graph that took it.

Added nodes: ``cut-op:<k>`` (the branch's ops), ``cut:<j>`` (the cuts; ``cut_point``),
and ``input:<i>`` for an input only the branch used; all ``reachable=False``, with
``cut_branch=True`` and no gradient. Added edges carry ``dashed=True``.
``graph.graph["cut_branches"]`` lists each cut: node, call, label, module, location,
code, the parameters and nodes behind it, and the consumer node (or None).
"""
from __future__ import annotations

import logging
from typing import Any

import networkx as nx
import torch

from gradviz.core.stats import tensors as gstats
from gradviz.core.trace.cut_tape import BranchOp, CutPoint, CutTape
from gradviz.core.runtime.formatting import short_location
from gradviz.core.script.load import ModelScript, load_script
from gradviz.core.script.run import prepare
from gradviz.core.trace.walk import node_ids_for, walk

log = logging.getLogger(__name__)

_NO_GRAD = gstats.prefixed(None, "grad")
CALL_LABELS = {"detach": ".detach()", "detach_": ".detach_()", "data": ".data", "numpy": ".numpy()",
               "item": ".item()", "tolist": ".tolist()", "no_grad": "torch.no_grad()", "unused": "result unused"}


def cut_off_params(graph: nx.DiGraph) -> list[str]:
    """Trainable parameters of a traced graph that no gradient reached."""
    return [a["param"] for _, a in graph.nodes(data=True)
            if a.get("kind") == "param" and a.get("reachable") is False and a.get("requires_grad", True)
            and not a.get("cut_branch")]


def add_cut_branches(graph: nx.DiGraph, source: Any, *, step: int = 0, seed: int | None = 0,
                     device: str | None = None) -> list[dict]:
    """Add the cut branches of a traced script's graph (in place); returns ``graph["cut_branches"]``.

    Nothing is added (and no forward runs) when every trainable parameter is reached.
    """
    params = cut_off_params(graph)
    if not params:
        graph.graph.setdefault("cut_branches", [])
        return graph.graph["cut_branches"]
    script = source if isinstance(source, ModelScript) else load_script(source)
    tape, ids, modules = _run_tape(script, params, step, seed, device)
    _add_nodes(graph, tape, modules)
    _add_edges(graph, tape, ids)
    graph.graph["cut_branches"] = _summaries(graph, tape, ids)
    if tape.truncated:
        graph.graph["cut_branches_truncated"] = True
    return graph.graph["cut_branches"]


def _run_tape(script: ModelScript, params: list[str], step: int, seed: int | None, device: str | None
              ) -> tuple[CutTape, dict[Any, str], dict[str, str]]:
    """The forward again, as ``trace`` runs it, under the tape; and the trace's id of each autograd node."""
    run = prepare(script, step=step, seed=seed, device=device)
    model, inputs, targets = run.model, run.inputs, run.targets
    tape = CutTape(model, params, inputs)
    with tape:
        loss = script.check_loss(script.compute_loss(model, inputs, targets))
    nodes, _ = walk([loss.grad_fn])
    param_names = {id(p): n for n, p in model.named_parameters()}
    input_names = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad}
    ids = dict(zip(nodes, node_ids_for(nodes, param_names, input_names)))
    modules = {path: type(m).__name__ for path, m in model.named_modules()}
    return tape, ids, modules


def _base_attrs(module: str, modules: dict[str, str]) -> dict:
    return dict(outputs=[], saved=[], custom=None, device="", module=module, module_type=modules.get(module, ""),
                reachable=False, cut_branch=True, **_NO_GRAD)


def _add_nodes(graph: nx.DiGraph, tape: CutTape, modules: dict[str, str]) -> None:
    for op in tape.ops:
        graph.add_node(op.key, kind="op", label=op.label, op=op.op, call=op.call, shape=op.shape, dtype=op.dtype,
                       location=op.location, code=op.code, no_grad=not op.grad_enabled,
                       **_base_attrs(op.module, modules))
    for point in tape.cut_points:
        graph.add_node(point.key, kind="op", label=cut_label(point), op="", call=point.call,
                       shape=[], dtype="", location=point.location, code=point.code, note=short_location(point.location),
                       cut_point=True, **_base_attrs(point.module, modules))
    unused = _unused_ends(tape)
    for k, (module, _) in enumerate(unused.items()):
        graph.add_node(f"cut:unused:{k}", kind="op", label=CALL_LABELS["unused"], op="", call="unused", shape=[],
                       dtype="", location="", code="", note=f"module {module}" if module else "",
                       cut_point=True, **_base_attrs(module, modules))


def cut_label(point: CutPoint) -> str:
    """``.detach()``, ``torch.no_grad()``, or the round trip as written: ``.detach().cpu().numpy()``."""
    label = CALL_LABELS.get(point.call, point.call)
    trip = [c for c in point.then if c in ("cpu", "numpy", "tolist", "item")]
    if trip and any(c in ("numpy", "tolist", "item") for c in trip):
        label += "".join(f".{c}()" for c in trip)
    return label


def _unused_ends(tape: CutTape) -> dict[str, list[BranchOp]]:
    """Branch ops computed with recording on whose results lead to no cut: the module ran, but
    nothing it made reached the loss. Grouped by module (one "result unused" end each)."""
    fed = {s for op in tape.ops for s in op.sources if isinstance(s, str)}
    fed |= {s for p in tape.cut_points for s in p.sources if isinstance(s, str)}
    ends: dict[str, list[BranchOp]] = {}
    for op in tape.ops:
        if op.grad_enabled and op.key not in fed:
            ends.setdefault(op.module, []).append(op)
    return ends


def _add_edges(graph: nx.DiGraph, tape: CutTape, ids: dict[Any, str]) -> None:
    for op in tape.ops:
        for k, src in enumerate(op.sources):
            _dashed_edge(graph, _resolve(graph, tape, src, ids), op.key, k)
    for point in tape.cut_points:
        for k, src in enumerate(point.sources):
            _dashed_edge(graph, _resolve(graph, tape, src, ids), point.key, k)
    for region, point in tape.regions().items():    # no_grad regions: their last ops end at the region's node
        members = [op for op in tape.ops if op.region == region]
        consumed = {s for op in members for s in op.sources if isinstance(s, str)}
        for op in members:
            if op.key not in consumed:
                _dashed_edge(graph, op.key, point.key, 0)
    for point in tape.cut_points:
        consumer = ids.get(point.consumer) if point.consumer is not None else None
        if consumer is not None and consumer in graph:
            _dashed_edge(graph, point.key, consumer, 0)
    for k, (_module, ops) in enumerate(_unused_ends(tape).items()):
        for op in ops:
            _dashed_edge(graph, op.key, f"cut:unused:{k}", 0)


def _resolve(graph: nx.DiGraph, tape: CutTape, src: Any, ids: dict[Any, str]) -> str | None:
    if isinstance(src, str):
        return src if src in graph else None
    if isinstance(src, tuple) and src[0] == "input":
        nid = f"input:{src[1]}"
        if nid not in graph:           # an input only the branch used
            shape, dtype = tape.input_facts.get(src[1], ([], ""))
            graph.add_node(nid, kind="input", label=f"input {src[1]}", input_index=src[1], op="", shape=shape,
                           dtype=dtype, location="", code="", call="", **_base_attrs("", {}))
        return nid
    if isinstance(src, tuple) and src[0] == "fn":
        nid = ids.get(src[1])
        return nid if nid in graph else None
    return None


def _dashed_edge(graph: nx.DiGraph, u: str | None, v: str, arg: int) -> None:
    if u is None or u == v:
        return
    if graph.has_edge(u, v):
        graph.edges[u, v]["count"] = graph.edges[u, v].get("count", 1) + 1
        return
    src = graph.nodes[u]
    graph.add_edge(u, v, shape=list(src.get("shape") or []), dtype=src.get("dtype", ""), output_nr=0, count=1,
                   dashed=True)


def _summaries(graph: nx.DiGraph, tape: CutTape, ids: dict[Any, str]) -> list[dict]:
    out = []
    ends = [p.key for p in tape.cut_points] + [n for n in graph if str(n).startswith("cut:unused:")]
    for key in ends:
        attrs = graph.nodes[key]
        behind = [n for n in nx.ancestors(graph, key) if graph.nodes[n].get("cut_branch")
                  or graph.nodes[n].get("reachable") is False]
        consumer = next((v for v in graph.successors(key)), None)
        out.append({"node": key, "call": attrs["call"], "label": attrs["label"], "module": attrs["module"],
                    "location": attrs["location"], "code": attrs["code"],
                    "params": sorted(graph.nodes[n]["param"] for n in behind if graph.nodes[n]["kind"] == "param"),
                    "nodes": sorted(behind), "consumer": consumer})
    return out
