"""``unreachable`` and ``frozen``: which parameters get no gradient, and why.

For each trainable parameter the loss does not depend on, the forward capture
tells the cause: the module was never called / the parameter never used; every
use ran with gradient recording off (``torch.no_grad``); a call cut the graph
(``.detach()``, a numpy round trip, ``.item()``/``.tolist()``, ``argmax``...); or
the module ran but its output never reached the loss. Where the cut lies between
two modules, the finding names both and carries the broken edge.
"""
from __future__ import annotations

import inspect
import os
import re
from typing import Any

from torch import nn

from gradviz.core.runtime.ties import tie_groups
from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding, fmt_params
from gradviz.core.diagnosis.probe import Probe
from gradviz.core.stats.sharding import type_name
from gradviz.core.trace.walk import is_leaf, walk

NONDIFF_CALLS = {"argmax", "argmin", "argsort", "round", "sign", "floor", "ceil", "eq", "ne", "lt", "le", "gt",
                 "ge", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "bucketize", "searchsorted",
                 "nonzero", "topk_indices", "where_indices", "__bool__", "__int__", "__float__"}
# how much we prefer a cut as the explanation (lower = better)
_CUT_RANK = {"detach": 0, "detach_": 0, "data": 0, "numpy": 0, "tolist": 1, "item": 2}


def _owner(name: str) -> str:
    return name.rpartition(".")[0]


def frozen_findings(probe: Probe) -> list[Finding]:
    model = probe.model
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return []
    modules = _common_modules(frozen)
    total = sum(1 for _ in model.parameters())
    return [Finding(
        "frozen", "info",
        f"{len(frozen)} of {total} parameters are frozen (requires_grad=False): {fmt_params(frozen)}. "
        "They get no gradient and do not train; that is expected when fine-tuning on purpose. If it is "
        "not deliberate, call requires_grad_(True) on them (and give them to the optimizer).",
        params=frozen, modules=modules, nodes=[f"param:{n}" for n in frozen],
        data={"count": len(frozen), "numel": sum(p.numel() for p in model.parameters() if not p.requires_grad)})]


def unreachable_findings(probe: Probe) -> list[Finding]:
    model = probe.model
    cap = probe.capture
    missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in probe.reached]
    # a parameter over the same bytes as one backward reached (two Parameter objects, one storage) is reached
    # through its twin: its values train with the twin's gradient (core/runtime/ties.py)
    twins = {name: group for group in tie_groups(model) for name in group}
    missing = [n for n in missing if not any(t in probe.reached for t in twins.get(n, ()))]
    if not missing or cap is None:
        return []
    modules = dict(model.named_modules())
    cut_params = _cut_param_sets(probe)
    groups: dict[tuple, list[str]] = {}
    for name in missing:
        groups.setdefault(_cause(probe, name, cut_params, modules), []).append(name)
    findings = []
    random_skips = _skipped_at_random(probe, groups)
    for cause, names in groups.items():
        if cause in random_skips:
            findings.append(random_skips[cause])
        else:
            findings.append(_finding(probe, cause, names, modules))
    return findings


def _skipped_at_random(probe: Probe, groups: dict[tuple, list[str]]) -> dict[tuple, Finding]:
    """Groups whose module never ran on this step but runs under other random draws (LayerDrop)."""
    from gradviz.core.diagnosis.step_reachability import modules_run_under_other_draws, skipped_at_random_finding
    never = {cause: names for cause, names in groups.items() if cause[0] == "never-called"}
    if not never or not probe.model.training:
        return {}
    owners = {_owner(n) for names in never.values() for n in names}
    ran = modules_run_under_other_draws(probe, owners)
    out = {}
    for cause, names in never.items():
        skipped = sorted({_owner(n) for n in names})
        if skipped and all(m in ran for m in skipped):
            out[cause] = skipped_at_random_finding(names, skipped, ran)
    return out


# -- causes -----------------------------------------------------------------

def _cut_param_sets(probe: Probe) -> list[set[str]]:
    """For each cut: the parameters behind the tensors it cut."""
    out = []
    for i, cut in enumerate(probe.capture.cuts):
        names = set(probe.capture.cut_params[i]) if i < len(probe.capture.cut_params) else set()
        if cut.input_nodes:
            nodes, _ = walk(cut.input_nodes)
            for fn in nodes:
                if is_leaf(fn) and id(fn.variable) in probe.param_names:
                    names.add(probe.param_names[id(fn.variable)])
        out.append(names)
    return out


def _cause(probe: Probe, name: str, cut_params: list[set[str]], modules: dict[str, nn.Module]) -> tuple:
    cap = probe.capture
    uses = cap.param_uses.get(name, [])
    owner = _owner(name)
    if not uses:
        entered = {c.path for c in cap.module_calls}
        if owner and owner not in entered:
            # the outermost module on the path that never ran
            parts = owner.split(".")
            for i in range(1, len(parts) + 1):
                path = ".".join(parts[:i])
                if path not in entered:
                    return ("never-called", path)
        return ("never-used", owner)
    if not any(u.grad_enabled for u in uses):
        first = uses[0].seq
        cut = None
        for i, c in enumerate(cap.cuts):
            if c.op == "no_grad" and cap.cut_seq[i] <= first:
                cut = i
        return ("no_grad", cut if cut is not None else -1, owner if cut is None else "")
    best = None
    for i, names in enumerate(cut_params):
        if name in names and cap.cuts[i].op not in ("no_grad", "enable_grad"):
            key = (_CUT_RANK.get(cap.cuts[i].op, 1), len(names), i)
            if best is None or key < best[0]:
                best = (key, i)
    if best is not None:
        return ("cut", best[1])
    return ("output-unused", owner)


# -- messages ---------------------------------------------------------------

def _finding(probe: Probe, cause: tuple, names: list[str], modules: dict[str, nn.Module]) -> Finding:
    # over 60 lines: one branch per cause, each a few lines of wording; a table of functions would hide
    # that they all fill the same message, location, edges and data
    cap = probe.capture
    kind = cause[0]
    owners = _common_modules(names)
    nodes = [f"param:{n}" for n in names]
    data: dict[str, Any] = {"cause": kind, "reasons": {}}
    edges: list[list[str]] = []
    location = None
    what = fmt_params(names)
    plural = len(names) != 1
    no_grad_txt = "get" if plural else "gets"
    if kind == "never-called":
        path = cause[1]
        mtype = type_name(modules[path]) if path in modules else "module"
        location = _definition_line(probe.model, path)
        why = f"module `{path}` ({mtype}) is never called in forward"
        msg = (f"{what} {no_grad_txt} no gradient: {why}, so its parameters are not in the graph and never "
               f"train (the optimizer still holds them). Call it in forward, or delete it.")
        data["module"] = path
    elif kind == "never-used":
        path = cause[1]
        location = _definition_line(probe.model, names[0])
        why = "no operation in forward ever uses " + ("them" if plural else "it")
        msg = (f"{what} {no_grad_txt} no gradient: {why} (module `{path or type(probe.model).__name__}` runs, "
               f"but not with {'these parameters' if plural else 'this parameter'}). Use "
               f"{'them' if plural else 'it'} in forward, or remove {'them' if plural else 'it'}.")
    elif kind == "no_grad":
        idx = cause[1]
        if idx >= 0:
            cut = cap.cuts[idx]
            location = cut.location or None
            where = f" at {_short(cut.location)}" if cut.location else ""
            code = f" (`{cut.code}`)" if cut.code else ""
            why = f"every use runs under `torch.no_grad()`{where}{code}"
        else:
            why = "every use runs with gradient recording off (torch.no_grad / inference_mode / set_grad_enabled(False))"
            uses = cap.param_uses.get(names[0], [])
            location = uses[0].location if uses and uses[0].location else None
        msg = (f"{what} {no_grad_txt} no gradient: {why}. no_grad wrapped around training code silently "
               "kills gradients: nothing fails, the loss just stops improving. Use no_grad only for "
               "evaluation; remove it from the training forward.")
        edges, data_edge = _broken_edge(probe, names, _last_use_seq(cap, names), None)
        data.update(data_edge)
    elif kind == "cut":
        idx = cause[1]
        cut = cap.cuts[idx]
        location = cut.location or None
        where = f" at {_short(cut.location)}" if cut.location else ""
        code = f" (`{cut.code}`)" if cut.code else ""
        op = cut.op
        why, fix, data["cut"] = _cut_words(op, _roundtrip(cap, idx), where, code)
        msg = f"{what} {no_grad_txt} no gradient: {why}. {fix}"
        edges, data_edge = _broken_edge(probe, names, cap.cut_seq[idx], cut)
        data.update(data_edge)
    else:  # output-unused
        path = cause[1]
        uses = cap.param_uses.get(names[0], [])
        location = uses[0].location if uses and uses[0].location else None
        why = (f"module `{path}` runs in forward, but its result never reaches the loss" if path
               else "the operations that use them never reach the loss")
        msg = (f"{what} {no_grad_txt} no gradient: {why}. Use that output in the loss, or stop computing it.")
    if data.get("from_module") and data.get("to_module"):
        msg += (f" The graph is broken between module `{data['from_module']}` and module "
                f"`{data['to_module']}`.")
    for n in names:
        data["reasons"][n] = kind
    nodes += [v for e in edges for v in e if v not in nodes]
    return Finding("unreachable", "error", msg, params=names, modules=owners, nodes=nodes,
                   location=location, edges=edges, data=data)


def _cut_words(op: str, roundtrip: str | None, where: str, code: str) -> tuple[str, str, str]:
    """(why, fix, cut kind) for a parameter cut off by ``op`` (``roundtrip``: how the tensor left torch)."""
    if op == "numpy" or roundtrip == "numpy":
        return (f"the graph is cut by a numpy round trip{where}{code}: `.detach()`/`.numpy()` leaves autograd and "
                "`torch.tensor(...)` makes a new tensor with no history",
                "Do that computation with torch operations instead of numpy.", "numpy")
    if op in ("tolist", "item") or roundtrip in ("tolist", "item"):
        call = roundtrip or op
        return (f"the graph is cut by `.{call}()`{where}{code}: it turns the tensor into Python numbers, "
                "and a tensor made from them has no history",
                f"Keep the values as tensors; use .{call}() only for logging.", call)
    if op in ("detach", "detach_", "data"):
        call = ".data" if op == "data" else f".{op}()"
        return (f"the graph is cut by `{call}`{where}{code}",
                f"Remove the {call} (it is meant for values you log or for targets, not for the training path).", op)
    if op in NONDIFF_CALLS:
        return (f"`{op}` is not differentiable{where}{code}: it returns integer indices / booleans, so no "
                "gradient flows back through it",
                "Use a differentiable relaxation: soft attention (softmax(scores) @ table), a straight-through "
                "estimator or Gumbel-softmax.", op)
    return f"the graph is cut by `{op}`{where}{code}", "Keep the training path inside autograd.", op


def _roundtrip(cap, idx: int) -> str | None:
    """'numpy'/'tolist'/'item' when the cut tensor left torch by that call afterwards."""
    cut = cap.cuts[idx]
    seq = cap.cut_seq[idx]
    for rseq, call, loc, ptr in cap.roundtrips:
        if rseq >= seq and ((cut.storage and ptr in cut.storage) or (loc and loc == cut.location)):
            return call
    return None


def _last_use_seq(cap, names: list[str]) -> int:
    seqs = [u.seq for n in names for u in cap.param_uses.get(n, [])]
    return max(seqs) if seqs else 0


def _broken_edge(probe: Probe, names: list[str], seq: int, cut) -> tuple[list[list[str]], dict]:
    """The module whose output was cut and the module that consumed it, and the edge to draw:
    from the cut-off module's last parameter to the first op of the consuming module."""
    cap = probe.capture
    nameset = set(names)
    # A: the outermost module that ran before the cut and holds cut-off parameters
    before = [c for c in cap.module_calls if c.seq_out is not None and c.seq_in <= seq]
    cands = [c for c in before if any(_owner(n) == c.path or _owner(n).startswith(c.path + ".") for n in nameset)
             and c.path != "" and not _holds_reached(probe, c.path)]
    a = None
    if cands:
        latest = max(c.seq_out for c in cands)
        a = min((c for c in cands if c.seq_out == latest), key=lambda c: c.path.count("."))
    # B: the first module entered after the cut that takes a tensor without gradient
    ptrs = set(cut.storage) if cut is not None else set()
    b = None
    for c in cap.module_calls:
        if c.seq_in <= seq or (a is not None and (c.path == a.path or c.path.startswith(a.path + "."))):
            continue
        if ptrs and any(not g and p in ptrs for _, g, p in c.inputs):
            b = c
            break
        if b is None and any(not g for _, g, _p in c.inputs):
            b = c
            if not ptrs:
                break
    data: dict[str, Any] = {}
    if a is not None:
        data["from_module"] = a.path
    if b is not None:
        data["to_module"] = b.path
    # the edge: last cut-off parameter of A -> first op of B (or first op after the cut)
    params_of_a = [n for n in names if a is None or _owner(n) == a.path or _owner(n).startswith(a.path + ".")]
    if not params_of_a:
        return [], data
    u = f"param:{params_of_a[-1]}"
    lo = b.seq_in if b is not None else seq
    hi = b.seq_out if b is not None and b.seq_out is not None else None
    v = None
    best = None
    for fn, s in cap.node_seq.items():
        if s >= lo and (hi is None or s <= hi) and fn in probe.node_ids:
            if best is None or s < best:
                best, v = s, probe.node_ids[fn]
    if v is None:
        return [], data
    if a is not None and b is not None:
        data["group_edge"] = [f"group:{a.path}", f"group:{b.path}"]
    return [[u, v]], data


def _holds_reached(probe: Probe, path: str) -> bool:
    return any(n.startswith(path + ".") for n in probe.reached)


def _common_modules(names: list[str]) -> list[str]:
    owners = []
    for n in names:
        o = _owner(n)
        if o not in owners:
            owners.append(o)
    # collapse to the shortest prefixes
    keep = [o for o in owners if not any(o != p and p and o.startswith(p + ".") for p in owners)]
    return keep


def _definition_line(model: nn.Module, path: str) -> str | None:
    """file:line of ``self.<attr> = ...`` in the parent module's __init__, when found."""
    if not path:
        return None
    parent_path, _, attr = path.rpartition(".")
    try:
        parent = model.get_submodule(parent_path) if parent_path else model
        init = type(parent).__init__
        lines, start = inspect.getsourcelines(init)
        filename = inspect.getsourcefile(init)
    except (TypeError, OSError, AttributeError):
        return None
    pat = re.compile(rf"self\.{re.escape(attr)}\s*(:[^=]*)?=")
    for i, line in enumerate(lines):
        if pat.search(line):
            return f"{filename}:{start + i}"
    return None


def _short(location: str) -> str:
    if not location:
        return ""
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


FROZEN = Check("frozen parameters", ("frozen",), lambda ctx: frozen_findings(ctx.probe), values=False)
UNREACHABLE = Check("reachability", ("unreachable", "sometimes-unused"), lambda ctx: unreachable_findings(ctx.probe),
                    needs=("forward",), values=False)
