"""Findings derived from recorded runs (no Qt, no torch needed).

``run_findings(reader)``: one rank's record -> exploding / vanishing gradients,
the first NaN/Inf step, parameters that never received a gradient.
``rank_findings(readers)``: several ranks of one DDP run -> ranks whose gradient
norms differ after the all-reduce (a desynchronised run), and -- by parameter
name -- the parameters that got no gradient (or were outside the autograd graph)
on some rank, which DDP's ``find_unused_parameters`` error gives only as indices.
``summary(readers)``: a plain dict for ``gradviz runs show`` and the app.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from gradviz.core.record.reader import RunReader

EXPLODING_NORM = 1e4
VANISHING_RATIO = 1e-6
DESYNC_RTOL = 1e-3

try:  # the diagnosis engineer's Finding, when it exists
    from gradviz.core.diagnosis import Finding  # type: ignore
except Exception:  # pragma: no cover - until gradviz.core.diagnosis lands
    @dataclass
    class Finding:  # same fields as gradviz.core.diagnosis.Finding
        code: str
        severity: str                      # "error" | "warning" | "info"
        message: str
        params: list[str] = field(default_factory=list)
        modules: list[str] = field(default_factory=list)
        nodes: list[str] = field(default_factory=list)
        location: str | None = None
        edges: list = field(default_factory=list)
        data: dict = field(default_factory=dict)


def _finding(code: str, severity: str, message: str, *, params: Sequence[str] = (), nodes: Sequence[str] = (),
             data: dict | None = None) -> Finding:
    params = list(params)
    modules = sorted({p.rpartition(".")[0] for p in params})
    nodes = list(nodes) or [f"param:{p}" for p in params]
    return Finding(code=code, severity=severity, message=message, params=params, modules=modules, nodes=nodes,
                   location=None, edges=[], data=dict(data or {}))


def finding_dict(f: Finding) -> dict:
    if hasattr(f, "to_dict"):
        return f.to_dict()
    try:
        return asdict(f)
    except TypeError:
        return {k: getattr(f, k, None) for k in ("code", "severity", "message", "params", "modules", "nodes",
                                                  "location", "edges", "data")}


def _names(names: Sequence[str], limit: int = 6) -> str:
    names = list(names)
    text = ", ".join(names[:limit])
    return text + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


# -- one run ----------------------------------------------------------------

def run_findings(reader: RunReader, steps: dict[str, np.ndarray] | None = None) -> list[Finding]:
    s = steps if steps is not None else reader.steps()
    names = reader.param_names
    out: list[Finding] = []
    if not len(s["step"]):
        return out
    where = f" (rank {reader.rank})" if reader.world_size > 1 else ""
    step = s["step"]
    norms = s["grad_norms"]
    has = s["has_grad"]
    gnorm = s["grad_norm"]

    # first NaN / Inf
    bad_param = (~np.isfinite(norms)) & has
    loss_bad = np.isinf(s["loss"]) | (np.isnan(s["loss"]) & _loss_recorded(reader, s))
    bad_step = loss_bad | bad_param.any(axis=1) | (~np.isfinite(gnorm) & has.any(axis=1))
    if bad_step.any():
        i = int(np.argmax(bad_step))
        params = [names[j] for j in np.flatnonzero(bad_param[i])]
        nodes = [f"param:{p}" for p in params]
        node_nan: list[str] = []
        got = reader.node_norms(int(step[i]))
        if got is not None and got[0] == int(step[i]):
            node_nan = [n for n, v in got[1].items() if v is not None and not math.isfinite(v)]
        what = "loss" if not math.isfinite(s["loss"][i]) and not params else "gradients"
        out.append(_finding(
            "run-first-nonfinite", "error",
            f"First NaN/Inf {what} at step {int(step[i])}{where}"
            + (f": {_names(params)}" if params else ""),
            params=params, nodes=node_nan or nodes,
            data={"step": int(step[i]), "loss": _num(s["loss"][i]), "grad_norm": _num(gnorm[i]),
                  "n_steps_nonfinite": int(bad_step.sum()), "nodes_nonfinite": node_nan}))

    # exploding
    finite = np.isfinite(gnorm)
    big = finite & (gnorm > EXPLODING_NORM)
    if big.any():
        i = int(np.argmax(big))
        j = int(np.nanargmax(np.where(finite, gnorm, -np.inf)))
        row = np.where(np.isfinite(norms[j]), norms[j], -np.inf)
        top = [names[k] for k in np.argsort(-row)[:5] if np.isfinite(row[k]) and row[k] > 0]
        out.append(_finding(
            "run-exploding", "error",
            f"Exploding gradients{where}: global norm {gnorm[i]:.3g} > {EXPLODING_NORM:g} first at step "
            f"{int(step[i])} (max {gnorm[j]:.3g} at step {int(step[j])}); largest: {_names(top, 3)}",
            params=top, data={"first_step": int(step[i]), "max": float(gnorm[j]), "max_step": int(step[j]),
                              "n_steps": int(big.sum())}))

    # vanishing: per-parameter norms < 1e-6 of the largest, in at least half the steps. As in the
    # live check (diagnosis/norms.py) only matrix-like parameters count: a bias can get a tiny or
    # exactly zero gradient by design (an attention key's bias: softmax ignores a shift)
    shapes = reader.meta.get("param_shapes") or []
    matrix = np.array([len(shapes[k]) >= 2 if k < len(shapes) else True for k in range(norms.shape[1])], dtype=bool)
    if matrix.sum() > 1:
        with np.errstate(invalid="ignore"):
            finite_norms = np.where(np.isfinite(norms) & matrix, norms, np.nan)
            largest = np.nanmax(np.where(np.isnan(finite_norms), -np.inf, finite_norms), axis=1)
            tiny = (finite_norms < VANISHING_RATIO * largest[:, None]) & (largest[:, None] > 0)
        counted = (has & matrix).sum(axis=0)
        frac = np.where(counted > 0, tiny.sum(axis=0) / np.maximum(counted, 1), 0.0)
        vanish = np.flatnonzero(frac >= 0.5)
        if len(vanish):
            params = [names[k] for k in vanish]
            out.append(_finding(
                "run-vanishing", "warning",
                f"Vanishing gradients{where}: {_names(params)} below {VANISHING_RATIO:g} of the largest "
                f"parameter gradient in most steps",
                params=params, data={"fraction_of_steps": {names[k]: float(frac[k]) for k in vanish}}))

    # never a gradient
    never = np.flatnonzero(~has.any(axis=0))
    if len(never):
        params = [names[k] for k in never]
        out.append(_finding(
            "run-no-gradient", "warning",
            f"{len(params)} parameter(s) never received a gradient in {len(step)} steps{where}: {_names(params)}",
            params=params, data={"steps": len(step)}))
    return out


def _loss_recorded(reader: RunReader, s: dict) -> np.ndarray:
    # loss NULL = not given, 'NaN' = NaN: the reader maps both to NaN; ask the file which
    rows = reader._query("SELECT step FROM steps WHERE typeof(loss) = 'text'")
    nan_steps = {int(r[0]) for r in rows}
    return np.array([int(x) in nan_steps for x in s["step"]], dtype=bool)


def _num(x: float) -> float | str:
    x = float(x)
    return x if math.isfinite(x) else str(x)


# -- several ranks ------------------------------------------------------------

def rank_findings(readers: Sequence[RunReader], steps: Sequence[dict] | None = None) -> list[Finding]:
    if len(readers) < 2:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # all-NaN columns (no gradient anywhere)
        return _rank_findings(readers, steps)


def _rank_findings(readers: Sequence[RunReader], steps: Sequence[dict] | None) -> list[Finding]:
    all_steps = list(steps) if steps is not None else [r.steps() for r in readers]
    ranks = [r.rank for r in readers]
    names = readers[0].param_names
    out: list[Finding] = []
    common = set(all_steps[0]["step"].tolist())
    for s in all_steps[1:]:
        common &= set(s["step"].tolist())
    common_arr = np.array(sorted(common), dtype=np.int64)
    same_params = all(r.param_names == names for r in readers)
    if len(common_arr):
        idx = [np.searchsorted(s["step"], common_arr) for s in all_steps]
        g = np.stack([s["grad_norm"][i] for s, i in zip(all_steps, idx)])          # ranks x steps
        with np.errstate(invalid="ignore", divide="ignore"):
            scale = np.nanmax(np.abs(g), axis=0)
            spread = np.nanmax(g, axis=0) - np.nanmin(g, axis=0)
            rel = np.where(scale > 0, spread / scale, 0.0)
        bad = rel > DESYNC_RTOL
        if bad.any():
            k = int(np.argmax(bad))
            st = int(common_arr[k])
            ref = np.nanmedian(g[:, k])
            off = [ranks[i] for i in range(len(ranks)) if abs(g[i, k] - ref) > DESYNC_RTOL * max(scale[k], 1e-30)]
            params: list[str] = []
            if same_params:
                p = np.stack([s["grad_norms"][i[k]] for s, i in zip(all_steps, idx)])   # ranks x params
                with np.errstate(invalid="ignore", divide="ignore"):
                    ps = np.nanmax(np.abs(p), axis=0)
                    pr = np.where(ps > 0, (np.nanmax(p, axis=0) - np.nanmin(p, axis=0)) / ps, 0.0)
                params = [names[j] for j in np.argsort(-pr) if pr[j] > DESYNC_RTOL][:10]
            out.append(_finding(
                "ranks-desync", "error",
                f"Ranks disagree after the all-reduce: global gradient norms differ by {rel[k]:.2g} (relative) "
                f"at step {st} (rank(s) {', '.join(map(str, off or ranks))} off); {int(bad.sum())} of "
                f"{len(common_arr)} common steps" + (f"; parameters: {_names(params)}" if params else ""),
                params=params,
                data={"first_step": st, "steps": int(bad.sum()), "common_steps": len(common_arr),
                      "max_relative_difference": float(np.nanmax(rel)), "ranks": ranks,
                      "norms_at_first": {str(r): _num(v) for r, v in zip(ranks, g[:, k])}}))
    # parameters with no gradient on some rank but not all (grad None), or outside some rank's graph
    if same_params:
        unused: dict[str, dict[str, list[int]]] = {}
        for r, s in zip(readers, all_steps):
            if not len(s["step"]):
                continue
            missing = ~s["has_grad"]
            for j in np.flatnonzero(missing.any(axis=0)):
                unused.setdefault(names[j], {}).setdefault(str(r.rank), []).append(
                    int(s["step"][int(np.argmax(missing[:, j]))]))
            for pname in _params_outside_graph(r):
                unused.setdefault(pname, {}).setdefault(str(r.rank), [])
        partial = {p: v for p, v in unused.items() if len(v) < len(readers)}
        if partial:
            params = sorted(partial, key=names.index)
            detail = "; ".join(f"{p} on rank {', '.join(sorted(partial[p]))}" for p in params[:6])
            out.append(_finding(
                "ranks-unused-param", "error",
                f"{len(params)} parameter(s) got no gradient on some ranks only (what DDP's "
                f"find_unused_parameters error reports as indices): {detail}",
                params=params,
                data={"params": {p: {"ranks": sorted(int(x) for x in partial[p]),
                                     "index": names.index(p)} for p in params}}))
    return out


def _params_outside_graph(reader: RunReader) -> list[str]:
    """Parameters absent from (not reachable in) some stored autograd graph of this rank."""
    found: list[str] = []
    for gid, _, _ in reader.graph_ids():
        g = reader.graph(gid)
        if g is None:
            continue
        for nid, attrs in g.nodes(data=True):
            if attrs.get("kind") == "param" and attrs.get("reachable") is False:
                name = attrs.get("param") or nid[len("param:"):]
                if name not in found:
                    found.append(name)
    return found


def findings(readers: Sequence[RunReader]) -> list[Finding]:
    steps = [r.steps() for r in readers]
    out: list[Finding] = []
    for r, s in zip(readers, steps):
        out.extend(run_findings(r, s))
    out.extend(rank_findings(readers, steps))
    return out


# -- summary --------------------------------------------------------------------

def summary(readers: Sequence[RunReader]) -> dict[str, Any]:
    steps = [r.steps() for r in readers]
    ranks = []
    for r, s in zip(readers, steps):
        g = s["grad_norm"]
        fin = g[np.isfinite(g)]
        loss = s["loss"]
        ranks.append({
            "path": str(r.path), "rank": r.rank, "world_size": r.world_size,
            "status": r.meta.get("status"), "model_class": r.meta.get("model_class"),
            "hostname": r.meta.get("hostname"), "pid": r.meta.get("pid"), "created": r.meta.get("created"),
            "gradviz_version": r.meta.get("gradviz_version"), "n_params": len(r.param_names),
            "steps": int(len(s["step"])),
            "first_step": int(s["step"][0]) if len(s["step"]) else None,
            "last_step": int(s["step"][-1]) if len(s["step"]) else None,
            "last_loss": _num(loss[-1]) if len(loss) else None,
            "grad_norm": ({"min": float(fin.min()), "median": float(np.median(fin)), "max": float(fin.max()),
                           "last": _num(g[-1])} if len(fin) else None),
            "node_steps": len(r.node_steps()), "graphs": len(r.graph_ids()),
            "seconds": float(s["time"][-1] - s["time"][0]) if len(s["time"]) > 1 else 0.0,
        })
    found = []
    for r, s in zip(readers, steps):
        found.extend(run_findings(r, s))
    found.extend(rank_findings(readers, steps))
    return {"ranks": ranks, "findings": [finding_dict(f) for f in found]}
