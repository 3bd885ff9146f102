"""Findings that compare the ranks of one run: pure functions of ``RunData`` (see ``analysis``)."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Sequence

import numpy as np

from gradviz.core.diagnosis.findings import Finding
from gradviz.core.record.finding_parts import json_num, make_finding, names_text

if TYPE_CHECKING:
    from gradviz.core.record.rundata import RunData

__all__ = ["rank_findings", "DESYNC_RTOL"]

DESYNC_RTOL = 1e-3


def rank_findings(runs: Sequence["RunData"]) -> list[Finding]:
    if len(runs) < 2:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # all-NaN columns (no gradient anywhere)
        out = [_desync(runs), _unused_on_some_ranks(runs)]
    return [f for f in out if f is not None]


def _desync(runs: Sequence["RunData"]) -> Finding | None:
    """Global gradient norms that differ between ranks at a common step (after the all-reduce
    or the sharded reduction they must agree)."""
    all_steps = [r.steps for r in runs]
    ranks = [r.rank for r in runs]
    names = runs[0].param_names
    common = set(all_steps[0]["step"].tolist())
    for s in all_steps[1:]:
        common &= set(s["step"].tolist())
    common_arr = np.array(sorted(common), dtype=np.int64)
    if not len(common_arr):
        return None
    idx = [np.searchsorted(s["step"], common_arr) for s in all_steps]
    g = np.stack([s["grad_norm"][i] for s, i in zip(all_steps, idx)])          # ranks x steps
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.nanmax(np.abs(g), axis=0)
        spread = np.nanmax(g, axis=0) - np.nanmin(g, axis=0)
        rel = np.where(scale > 0, spread / scale, 0.0)
    bad = rel > DESYNC_RTOL
    if not bad.any():
        return None
    k = int(np.argmax(bad))
    st = int(common_arr[k])
    ref = np.nanmedian(g[:, k])
    off = [ranks[i] for i in range(len(ranks)) if abs(g[i, k] - ref) > DESYNC_RTOL * max(scale[k], 1e-30)]
    params: list[str] = []
    if all(r.param_names == names for r in runs):
        p = np.stack([s["grad_norms"][i[k]] for s, i in zip(all_steps, idx)])   # ranks x params
        with np.errstate(invalid="ignore", divide="ignore"):
            ps = np.nanmax(np.abs(p), axis=0)
            pr = np.where(ps > 0, (np.nanmax(p, axis=0) - np.nanmin(p, axis=0)) / ps, 0.0)
        params = [names[j] for j in np.argsort(-pr) if pr[j] > DESYNC_RTOL][:10]
    return make_finding(
        "ranks-desync", "error",
        "Ranks disagree after the gradient reduction (all-reduce, reduce-scatter): global gradient norms "
        f"differ by {rel[k]:.2g} (relative) "
        f"at step {st} (rank(s) {', '.join(map(str, off or ranks))} off); {int(bad.sum())} of "
        f"{len(common_arr)} common steps" + (f"; parameters: {names_text(params)}" if params else ""),
        params=params,
        data={"first_step": st, "steps": int(bad.sum()), "common_steps": len(common_arr),
              "max_relative_difference": float(np.nanmax(rel)), "ranks": ranks,
              "norms_at_first": {str(r): json_num(v) for r, v in zip(ranks, g[:, k])}})


def _unused_on_some_ranks(runs: Sequence["RunData"]) -> Finding | None:
    """Parameters with no gradient on some rank but not all (grad None), or outside some rank's graph."""
    names = runs[0].param_names
    if not all(r.param_names == names for r in runs):
        return None
    unused: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        s = run.steps
        if not len(s["step"]):
            continue
        missing = ~s["has_grad"]
        for j in np.flatnonzero(missing.any(axis=0)):
            unused.setdefault(names[j], {}).setdefault(str(run.rank), []).append(
                int(s["step"][int(np.argmax(missing[:, j]))]))
        for pname in _params_outside_graph(run):
            unused.setdefault(pname, {}).setdefault(str(run.rank), [])
    partial = {p: v for p, v in unused.items() if len(v) < len(runs)}
    if not partial:
        return None
    params = sorted(partial, key=names.index)
    detail = "; ".join(f"{p} on rank {', '.join(sorted(partial[p]))}" for p in params[:6])
    return make_finding(
        "ranks-unused-param", "error",
        f"{len(params)} parameter(s) got no gradient on some ranks only (what DDP's "
        f"find_unused_parameters error reports as indices): {detail}",
        params=params,
        data={"params": {p: {"ranks": sorted(int(x) for x in partial[p]),
                             "index": names.index(p)} for p in params}})


def _params_outside_graph(run: "RunData") -> list[str]:
    """Parameters absent from (not reachable in) some stored autograd graph of this rank."""
    found: list[str] = []
    for g in run.graphs:
        for nid, attrs in g.nodes(data=True):
            if attrs.get("kind") == "param" and attrs.get("reachable") is False:
                name = attrs.get("param") or nid[len("param:"):]
                if name not in found:
                    found.append(name)
    return found
