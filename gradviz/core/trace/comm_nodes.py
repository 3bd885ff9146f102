"""The steps FSDP2 and DTensor add to an autograd graph, labelled and grouped so a user can fold them away.

What the graph holds (torch 2.13 and 2.14, ``tests/test_fsdp_graph.py``):

* FSDP2 (``fully_shard``): one ``RegisterPostBackwardFunctionBackward`` node on the inputs of each
  sharded module whose inputs need a gradient. It passes gradients through unchanged; when backward
  reaches it, that module's backward is done and FSDP reduce-scatters the module's gradients (and
  frees its gathered parameters). The all-gathers (before forward, and again before backward when
  the module reshards after forward) run in module hooks: they are no graph nodes, so they are told
  on the reduce-scatter node (``comm['all_gather']``) instead of being invented as nodes.
* DTensor / tensor parallelism: ``_FromTorchTensorBackward`` (a local tensor made a DTensor, at a
  parallel module's input), ``RedistributeBackward`` (placements changed: the all-reduce of a
  row-wise layer's partial sums, the all-gather of a column-wise one) and ``_ToTorchTensorBackward``
  (back to a local tensor).
* ``torch.distributed.nn.functional`` collectives used by hand (``_AllGather``, ``_AllReduce``...).

Each such node gets ``comm`` ({kind, via, module, params, mesh, all_gather}) and a readable
label, and is moved into a pseudo-module below the module it serves -- ``fc2.[reduce-scatter]``
-- one per connected run of such nodes. The module table gets an entry for each (type
``FSDP communication`` / ``DTensor communication``), so ``grouping.collapse`` draws it as a
labelled box the user can collapse or open like any module; the user's ops keep their names,
modules and lines.
"""
from __future__ import annotations

import networkx as nx
from torch import nn

from gradviz.core.stats import sharding

__all__ = ["annotate", "comm_modules", "COMM_KINDS"]

# autograd.Function class name -> (kind, via, label)
COMM_KINDS = {
    "RegisterPostBackwardFunction": ("reduce-scatter", "FSDP", "FSDP reduce-scatter"),
    "_FromTorchTensor": ("to DTensor", "DTensor", "to DTensor"),
    "_ToTorchTensor": ("to local", "DTensor", "to local tensor"),
    "Redistribute": ("redistribute", "DTensor", "redistribute"),
    "_AllGather": ("all-gather", "c10d", "all-gather"),
    "_AllGatherBase": ("all-gather", "c10d", "all-gather"),
    "_AllReduce": ("all-reduce", "c10d", "all-reduce"),
    "_Reduce_Scatter": ("reduce-scatter", "c10d", "reduce-scatter"),
    "_AlltoAll": ("all-to-all", "c10d", "all-to-all"),
    "_AlltoAllSingle": ("all-to-all", "c10d", "all-to-all"),
    "_Broadcast": ("broadcast", "c10d", "broadcast"),
    "_Gather": ("gather", "c10d", "gather"),
    "_Scatter": ("scatter", "c10d", "scatter"),
    "_Reduce": ("reduce", "c10d", "reduce"),
}
TYPE_OF = {"FSDP": "FSDP communication", "DTensor": "DTensor communication", "c10d": "collective"}
# what a step does, for the inspector (by kind)
WHAT = {
    "reduce-scatter": "when the gradient reaches this point the module's backward is done: its parameters' "
                      "gradients are reduce-scattered into their shards (averaged over the ranks)",
    "to DTensor": "this rank's local tensor wrapped as a DTensor (no data moves forward; backward may "
                  "redistribute)",
    "to local": "a DTensor unwrapped to this rank's local piece",
    "redistribute": "a change of DTensor placements: an all-gather, all-reduce or reduce-scatter across the mesh",
}


def _comm_kind(attrs: dict) -> tuple[str, str, str] | None:
    qualified = attrs.get("custom") or ""
    if attrs.get("kind") != "op" or not qualified.startswith("torch.distributed."):
        return None
    return COMM_KINDS.get(qualified.rsplit(".", 1)[-1], ("collective", "c10d", qualified.rsplit(".", 1)[-1]))


def annotate(graph: nx.DiGraph, model: nn.Module | None) -> int:
    """Label the communication nodes of ``graph`` and give each run its pseudo-module; returns how
    many nodes are communication. Call after every node has its module (``graph_build``)."""
    units = {u["module"]: u for u in sharding.fsdp_units(model)}
    if model is not None and sharding.any_dtensor(model.parameters()):
        graph.graph["sharding"] = {"fsdp_units": list(units.values()), **sharding.world()}
    found = {nid: kind for nid, attrs in graph.nodes(data=True) if (kind := _comm_kind(attrs))}
    if not found:
        return 0
    taken: dict[str, int] = {}
    for run in _runs(graph, found):
        owner = graph.nodes[run[0]].get("module", "")
        if found[run[0]][1] == "FSDP":
            owner = _fsdp_owner(graph, run, units) or owner
        kind, via, _ = found[run[0]]
        base = f"{owner}.[{kind}]" if owner else f"[{kind}]"
        taken[base] = taken.get(base, 0) + 1
        path = base if taken[base] == 1 else f"{base[:-1]} {taken[base]}]"
        for nid in run:
            k, v, label = found[nid]
            info = {"kind": k, "via": v, "module": owner, "group": path,
                    "what": WHAT.get(k, f"a {k} across the process group")}
            unit = units.get(owner) if v == "FSDP" else None
            if unit is not None:
                info.update(params=list(unit["params"]), mesh=list(unit["mesh"]),
                            all_gather="before forward, and again before backward"
                            if unit["reshard_after_forward"] else "before forward (kept for backward)")
            graph.nodes[nid].update(comm=info, label=label, module=path, module_type=TYPE_OF[v])
    return len(found)


def _fsdp_owner(graph: nx.DiGraph, run: list[str], units: dict[str, dict]) -> str | None:
    """The FSDP module whose inputs a reduce-scatter node sits on: the deepest FSDP module holding
    every op that takes its outputs (a block's first op may be a sub-layer's: GPT-2's ``ln_1``)."""
    users = [graph.nodes[s].get("module") or "" for nid in run for s in graph.successors(nid) if s not in run]
    if not users:
        return None
    common = users[0].split(".") if users[0] else []
    for path in users[1:]:
        parts = path.split(".") if path else []
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    for n in range(len(common), -1, -1):
        path = ".".join(common[:n])
        if path in units:
            return path
    return ".".join(common) if not units else None


def _runs(graph: nx.DiGraph, found: dict[str, tuple]) -> list[list[str]]:
    """Connected runs of communication nodes of one module, in graph order (one box each: two runs
    in one box -- a layer's input and output side -- would make the collapsed graph a cycle)."""
    sub = graph.subgraph(found)
    order = {nid: i for i, nid in enumerate(graph.nodes)}
    runs = []
    for comp in nx.weakly_connected_components(sub):
        by_module: dict[str, list[str]] = {}
        for nid in comp:
            by_module.setdefault(graph.nodes[nid].get("module", ""), []).append(nid)
        runs += [sorted(nodes, key=order.get) for nodes in by_module.values()]
    return sorted(runs, key=lambda r: order[r[0]])


def comm_modules(graph: nx.DiGraph) -> dict[str, dict]:
    """Module-table entries (``modules.module_table``'s layout) of the communication pseudo-modules."""
    out: dict[str, dict] = {}
    for _, attrs in graph.nodes(data=True):
        comm = attrs.get("comm")
        if not comm:
            continue
        path = comm["group"]
        entry = out.get(path)
        if entry is None:
            owner = comm["module"]
            what = TYPE_OF[comm["via"]]
            entry = out[path] = {
                "type": what, "parent": owner, "depth": path.count(".") + 1,
                "params": [], "numel": 0, "param_bytes": 0, "activation_bytes": 0, "grad_norm": None, "nodes": 0,
                "comm": {k: v for k, v in comm.items() if k != "group"}}
        entry["nodes"] += 1
        entry["activation_bytes"] += attrs.get("activation_bytes") or 0
    return out
