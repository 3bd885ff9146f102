"""Findings derived from recorded runs: pure functions of ``RunData`` (no Qt, no torch, no I/O).

``run_findings(run)``: one rank's record -> exploding / vanishing gradients, the first
NaN/Inf step, parameters that never received a gradient.
``rank_findings(runs)`` (``analysis_ranks``): several ranks of one run -> ranks whose
gradient norms differ after the all-reduce (a desynchronised run), and -- by parameter
name -- the parameters that got no gradient (or were outside the autograd graph) on some
rank, which DDP's ``find_unused_parameters`` error gives only as indices.
``summary(runs)``: a plain dict for ``gradviz runs show`` and the app.
The data comes from ``gradviz.core.record.loading.load_run`` (the reader's side).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from gradviz.core.diagnosis.findings import Finding
from gradviz.core.loop.advice import loop_finding
from gradviz.core.loop.trend import flat_loss
from gradviz.core.record.analysis_ranks import rank_findings
from gradviz.core.record.finding_parts import finding_dict, json_num, make_finding, names_text

if TYPE_CHECKING:
    from gradviz.core.record.rundata import RunData

EXPLODING_NORM = 1e4
VANISHING_RATIO = 1e-6


# -- one run ----------------------------------------------------------------

def first_nonfinite_step(run: "RunData") -> int | None:
    """The first step whose loss (as recorded), gradient norms or global norm is NaN/Inf."""
    bad = _nonfinite_steps(run.steps)
    return int(run.steps["step"][int(np.argmax(bad))]) if bad.any() else None


def _nonfinite_steps(s: dict[str, np.ndarray]) -> np.ndarray:
    has = s["has_grad"]
    bad_param = (~np.isfinite(s["grad_norms"])) & has
    # loss NaN where none was given is "not recorded", not a NaN loss
    loss_bad = np.isinf(s["loss"]) | (np.isnan(s["loss"]) & s["loss_given"])
    return loss_bad | bad_param.any(axis=1) | (~np.isfinite(s["grad_norm"]) & has.any(axis=1))


def run_findings(run: "RunData") -> list[Finding]:
    if not len(run.steps["step"]):
        return []
    loop = _loop_findings(run)
    frozen = {p for f in loop if f.code == "frozen-but-updated" for p in f.params}
    out = [_first_nonfinite(run), _exploding(run), _vanishing(run, frozen), _never_a_gradient(run),
           _model_changed(run), _loss_flat(run)]
    return loop + [f for f in out if f is not None]


def _loop_findings(run: "RunData") -> list[Finding]:
    """The loop doctor's findings, stored by the recorder (the meta was validated by the reader)."""
    out = []
    for d in run.meta.get("loop_findings") or []:
        out.append(Finding(code=d["code"], severity=d["severity"], message=d["message"] + run.label,
                           params=list(d.get("params", [])), modules=list(d.get("modules", [])),
                           nodes=list(d.get("nodes", [])), location=d.get("location"), edges=[],
                           data=dict(d.get("data", {}))))
    return out


def _loss_flat(run: "RunData") -> Finding | None:
    """``loss-flat`` (``gradviz.core.loop.trend``): healthy gradient norms, an optimizer that moves the
    weights (update ratios recorded above 0), and a loss that does not fall."""
    s = run.steps
    given = s["loss_given"]
    ratios = s["update_ratio"]
    with np.errstate(invalid="ignore"):
        if not (np.isfinite(ratios) & (ratios > 0)).any():
            return None               # no optimizer step was seen moving the weights: nothing to expect
    flat = flat_loss(s["step"][given], s["loss"][given], s["grad_norm"][given])
    if flat is None:
        return None
    return loop_finding("loss-flat", f"The loss stays at {flat['loss_first']:.4g} -> {flat['loss_last']:.4g} over "
                        f"steps {flat['first_step']}-{flat['last_step']}{run.label} while the gradient norm is "
                        f"healthy (median {flat['grad_norm_median']:.3g})", step=flat["first_step"], data=flat)


def _first_nonfinite(run: "RunData") -> Finding | None:
    s, names = run.steps, run.param_names
    bad_step = _nonfinite_steps(s)
    if not bad_step.any():
        return None
    i = int(np.argmax(bad_step))
    step = int(s["step"][i])
    params = [names[j] for j in np.flatnonzero((~np.isfinite(s["grad_norms"][i])) & s["has_grad"][i])]
    nodes = [f"param:{p}" for p in params]
    node_nan = [n for n, v in run.node_norms.get(step, {}).items() if v is not None and not math.isfinite(v)]
    what = "loss" if not math.isfinite(s["loss"][i]) and not params else "gradients"
    return make_finding(
        "run-first-nonfinite", "error",
        f"First NaN/Inf {what} at step {step}{run.label}" + (f": {names_text(params)}" if params else ""),
        params=params, nodes=node_nan or nodes,
        data={"step": step, "loss": json_num(s["loss"][i]), "grad_norm": json_num(s["grad_norm"][i]),
              "n_steps_nonfinite": int(bad_step.sum()), "nodes_nonfinite": node_nan})


def _exploding(run: "RunData") -> Finding | None:
    s, names = run.steps, run.param_names
    step, norms, gnorm = s["step"], s["grad_norms"], s["grad_norm"]
    finite = np.isfinite(gnorm)
    big = finite & (gnorm > EXPLODING_NORM)
    if not big.any():
        return None
    i = int(np.argmax(big))
    j = int(np.nanargmax(np.where(finite, gnorm, -np.inf)))
    row = np.where(np.isfinite(norms[j]), norms[j], -np.inf)
    top = [names[k] for k in np.argsort(-row)[:5] if np.isfinite(row[k]) and row[k] > 0]
    return make_finding(
        "run-exploding", "error",
        f"Exploding gradients{run.label}: global norm {gnorm[i]:.3g} > {EXPLODING_NORM:g} first at step "
        f"{int(step[i])} (max {gnorm[j]:.3g} at step {int(step[j])}); largest: {names_text(top, 3)}",
        params=top, data={"first_step": int(step[i]), "max": float(gnorm[j]), "max_step": int(step[j]),
                          "n_steps": int(big.sum())})


def _vanishing(run: "RunData", frozen: set[str] = frozenset()) -> Finding | None:
    """Per-parameter norms < 1e-6 of the largest, in at least half the steps. As in the live
    check (diagnosis/norms.py) only matrix-like parameters count: a bias can get a tiny or
    exactly zero gradient by design (an attention key's bias: softmax ignores a shift)."""
    norms, has, names = run.steps["grad_norms"], run.steps["has_grad"], run.param_names
    shapes = run.meta.get("param_shapes") or []
    matrix = np.array([len(shapes[k]) >= 2 if k < len(shapes) else True for k in range(norms.shape[1])], dtype=bool)
    if matrix.sum() <= 1:
        return None
    with np.errstate(invalid="ignore"):
        finite_norms = np.where(np.isfinite(norms) & matrix, norms, np.nan)
        largest = np.nanmax(np.where(np.isnan(finite_norms), -np.inf, finite_norms), axis=1)
        tiny = (finite_norms < VANISHING_RATIO * largest[:, None]) & (largest[:, None] > 0)
    counted = (has & matrix).sum(axis=0)
    frac = np.where(counted > 0, tiny.sum(axis=0) / np.maximum(counted, 1), 0.0)
    # a frozen parameter the optimizer still moves has a zero gradient by the loop's bug, not vanishing
    vanish = [k for k in np.flatnonzero(frac >= 0.5) if names[k] not in frozen]
    if not len(vanish):
        return None
    params = [names[k] for k in vanish]
    return make_finding(
        "run-vanishing", "warning",
        f"Vanishing gradients{run.label}: {names_text(params)} below {VANISHING_RATIO:g} of the largest "
        f"parameter gradient in most steps",
        params=params, data={"fraction_of_steps": {names[k]: float(frac[k]) for k in vanish}})


def _never_a_gradient(run: "RunData") -> Finding | None:
    never = np.flatnonzero(~run.steps["has_grad"].any(axis=0))
    if not len(never):
        return None
    params = [run.param_names[k] for k in never]
    n = len(run.steps["step"])
    return make_finding(
        "run-no-gradient", "warning",
        f"{len(params)} parameter(s) never received a gradient in {n} steps{run.label}: {names_text(params)}",
        params=params, data={"steps": n})


def _model_changed(run: "RunData") -> Finding | None:
    """Parameters replaced, added or removed under the watch (the recorder followed them)."""
    changes = _changes(run)
    if not changes:
        return None
    parts = []
    for c in changes[:3]:
        what = "; ".join(f"{k} {names_text(c.get(k) or [], 4)}" for k in ("replaced", "added", "removed")
                         if c.get(k))
        parts.append(f"step {c['step']}: {what}")
    more = f" (+{len(changes) - 3} more changes)" if len(changes) > 3 else ""
    params = list(dict.fromkeys(n for c in changes for k in ("replaced", "added", "removed") for n in c.get(k) or []))
    return make_finding(
        "run-model-changed", "warning",
        f"The model's parameters changed during the run{run.label}, recorded from each change on: "
        + "; ".join(parts) + more, params=params, data={"changes": changes})


def findings(runs: Sequence["RunData"]) -> list[Finding]:
    out: list[Finding] = []
    for run in runs:
        out.extend(run_findings(run))
    out.extend(rank_findings(runs))
    return out


# -- summary --------------------------------------------------------------------

def summary(runs: Sequence["RunData"]) -> dict[str, Any]:
    """Per rank: where, what, how many steps, loss and global norm; and every finding."""
    return {"ranks": [_rank_summary(run) for run in runs], "findings": [finding_dict(f) for f in findings(runs)]}


def _rank_summary(run: "RunData") -> dict[str, Any]:
    s, meta = run.steps, run.meta
    g = s["grad_norm"]
    fin = g[np.isfinite(g)]
    loss = s["loss"]
    n = len(s["step"])
    return {
        "path": run.path, "rank": run.rank, "world_size": run.world_size,
        "status": meta.get("status"), "model_class": meta.get("model_class"),
        "hostname": meta.get("hostname"), "pid": meta.get("pid"), "created": meta.get("created"),
        "gradviz_version": meta.get("gradviz_version"), "n_params": len(run.param_names),
        "steps": n, "first_step": int(s["step"][0]) if n else None, "last_step": int(s["step"][-1]) if n else None,
        "last_loss": json_num(loss[-1]) if n else None,
        "grad_norm": ({"min": float(fin.min()), "median": _median(fin), "max": float(fin.max()),
                       "last": json_num(g[-1])} if len(fin) else None),
        "node_steps": len(run.node_steps), "graphs": len(run.graphs),
        "seconds": _span(s["time"]) if n > 1 else 0.0,
        "node": meta.get("node", 0), "nodes": meta.get("nodes", 1), "local_rank": meta.get("local_rank"),
        "norms": meta.get("norms"), "shards": _shards(run), "model_changes": _changes(run),
        "grad_norms": meta.get("grad_norms"), "max_grad_norm": meta.get("max_grad_norm"),
        "notes": list(run.notes),
    }


def _median(x: np.ndarray) -> float:
    """The median of finite values without overflow: np.median averages the two middle values as
    (a + b) / 2, which is inf for two norms near the float64 limit; halves first, the same value."""
    return float(np.median(x * 0.5) * 2.0)


def _span(times: np.ndarray) -> float:
    """Seconds from the first step to the last (times out of order or not finite: what is finite of it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        span = float(times[-1] - times[0])
    return span if math.isfinite(span) else 0.0


def _changes(run: "RunData") -> list[dict]:
    return list(run.meta.get("model_changes") or [])


def _shards(run: "RunData") -> dict[str, dict] | None:
    """{parameter: layout} of the sharded (DTensor) parameters of this rank (None: none)."""
    layouts = run.meta.get("param_shards")
    if not layouts:
        return None
    return {name: lay for name, lay in zip(run.param_names, layouts) if lay}


def shard_lines(ranks: list[dict]) -> list[str]:
    """The shard layout of a sharded run: each parameter's global shape and placements, and
    the local shape every rank holds (``ranks``: ``summary()["ranks"]``); [] when nothing is sharded."""
    sharded = [r for r in ranks if r.get("shards")]
    if not sharded:
        return []
    from gradviz.core.stats.sharding import fmt_layout

    first = sharded[0]["shards"]
    lines = [f"shard layout ({len(first)} sharded parameters; local shapes by rank):"]
    for name, layout in first.items():
        local = ", ".join(f"{r['rank']}: {'x'.join(map(str, r['shards'][name]['local_shape'])) or 'scalar'}"
                          for r in sharded if name in r["shards"])
        lines.append(f"  {name}: {fmt_layout(layout).rsplit(': local', 1)[0]}; local {local}")
    return lines
