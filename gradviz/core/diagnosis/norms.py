"""``exploding`` and ``vanishing`` from per-layer parameter gradient norms.

A layer is the module that owns parameters (``fc1``, ``layers.3``); only layers with a
matrix-like parameter (ndim >= 2: Linear, Conv, Embedding...) are compared, so a
bias or a LayerNorm scale that legitimately gets a small gradient is never called
vanishing. Layers are ordered as forward ran them (input first).

- exploding: a layer's gradient norm above 1e4 (the articles' alarm level), or norms
  that grow by three orders of magnitude or more from the output layer back to the
  input layer, rising layer over layer.
- vanishing: layers toward the input whose norm falls below 1e-6 of the largest
  layer's (or below 1e-6 outright while also 100x below the largest), the largest
  layer lying after them. Judged on depth: only the run of such layers that starts at
  the input counts (the norms shrink toward the input); one tiny layer between healthy
  ones (a gate initialised near zero, WavLM's relative-position gate) is not vanishing.
- zero-init (info, instead of vanishing): layers whose gradient is exactly zero because a
  weight after them is all zeros (a zero-initialised head, as torchvision's ViT has by
  design): the gradient through a zero matrix is exactly zero, but that weight's own
  gradient is not, so one update fixes it. ``check --steps K`` judges again after K updates.
"""
from __future__ import annotations

import math

import torch

from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding, fmt_num, fmt_params
from gradviz.core.diagnosis.probe import Probe
from gradviz.core.stats.tensors import norm_values

EXPLODE_NORM = 1e4
GROWTH = 1e3
VANISH_REL = 1e-6
VANISH_ABS = 1e-6


def layer_norms(probe: Probe) -> list[dict]:
    """[{layer, params, norm, order}] for layers with a matrix-like parameter and a gradient."""
    cap = probe.capture
    layers: dict[str, dict] = {}
    for name, p in probe.model.named_parameters():
        g = probe.grads.get(name)
        if g is None or not p.requires_grad:
            continue
        owner = name.rpartition(".")[0] or name
        entry = layers.setdefault(owner, {"layer": owner, "params": [], "sq": 0.0, "matrix": False,
                                          "order": math.inf})
        entry["params"].append(name)
        n = float(torch.linalg.vector_norm(norm_values(g.detach()).double()))
        entry["sq"] += n * n
        entry["matrix"] |= p.dim() >= 2
        uses = cap.param_uses.get(name) if cap is not None else None
        if uses:
            entry["order"] = min(entry["order"], uses[0].seq)
    out = []
    for e in layers.values():
        if e["matrix"] and e["order"] != math.inf:
            out.append({"layer": e["layer"], "params": e["params"], "norm": math.sqrt(e["sq"]),
                        "order": e["order"]})
    out.sort(key=lambda e: e["order"])
    return out


def norm_findings(probe: Probe, skip_zero: bool = False) -> list[Finding]:
    layers = layer_norms(probe)
    if not layers or not all(math.isfinite(e["norm"]) for e in layers):
        return []
    data_norms = {e["layer"]: e["norm"] for e in layers}
    return _exploding(layers, data_norms) + _vanishing(probe, layers, data_norms, skip_zero)


def _exploding(layers: list[dict], data_norms: dict) -> list[Finding]:
    norms = [e["norm"] for e in layers]
    total = math.sqrt(sum(n * n for n in norms))
    big = [e for e in layers if e["norm"] > EXPLODE_NORM]
    growth = None
    if len(layers) >= 4 and norms[-1] > 0:
        ratio = norms[0] / norms[-1]
        rises = sum(1 for a, b in zip(norms, norms[1:]) if a > b)   # larger toward the input
        if ratio >= GROWTH and rises >= 0.66 * (len(norms) - 1):
            growth = ratio
    if not big and not growth:
        return []
    flagged = big or layers[: max(1, len(layers) // 3)]
    params = [p for e in flagged for p in e["params"]]
    worst = max(flagged, key=lambda e: e["norm"])
    msg = (f"Exploding gradients: the gradient norm of layer `{worst['layer']}` is {fmt_num(worst['norm'])}"
           f" (all layers together {fmt_num(total)})")
    if growth:
        msg += (f", and the norms grow {fmt_num(growth)}x from the last layer `{layers[-1]['layer']}` back "
                f"to the first `{layers[0]['layer']}`, layer over layer")
    msg += (". Norms above 1e4 mean a layer amplifies the signal: the next steps will jump and the loss "
            "can turn NaN. Fix the cause: a smaller init (He/Kaiming, std sqrt(2/fan_in)), normalisation "
            "layers, residual connections, a lower learning rate, and check the data for outliers. "
            "clip_grad_norm_ only treats the symptom.")
    return [Finding("exploding", "warning", msg, params=params, modules=[e["layer"] for e in flagged],
                    nodes=[f"param:{p}" for p in params],
                    data={"layer_norms": data_norms, "max_norm": worst["norm"], "global_norm": total,
                          "growth": growth})]


def _vanishing(probe: Probe, layers: list[dict], data_norms: dict, skip_zero: bool) -> list[Finding]:
    norms = [e["norm"] for e in layers]
    top = max(range(len(layers)), key=lambda i: norms[i])
    biggest = norms[top]
    if biggest <= 0:
        return []
    tiny = [e for e in layers[:top] if not (e["norm"] == 0 and skip_zero)
            and (e["norm"] < VANISH_REL * biggest or (e["norm"] < VANISH_ABS and e["norm"] < 1e-2 * biggest))]
    zero_w, unexplained = _split_zero_init(probe, layers, tiny)     # a (near-)zero weight after them explains some
    run = []
    for e in layers[:top]:          # the run from the input: a healthy layer before it ends the run
        if e["norm"] == 0 and skip_zero:
            continue                # a dead-ReLU layer (its own finding) neither counts nor ends the run
        if e not in tiny:
            break
        run.append(e)
    low = [e for e in run if e in unexplained]
    findings = [_zero_init_finding(zero_w, data_norms)] if zero_w else []
    if low:
        params = [p for e in low for p in e["params"]]
        first = low[0]
        msg = (f"Vanishing gradients: {len(low)} layer(s) toward the input get almost no gradient: "
               f"`{first['layer']}` has a gradient norm of {fmt_num(first['norm'])}, "
               f"{fmt_num(first['norm'] / biggest)} of the largest (`{layers[top]['layer']}`, "
               f"{fmt_num(biggest)}); the norms shrink layer by layer toward the input, so the first "
               "layers barely train. Fixes: ReLU/GELU instead of sigmoid/tanh in hidden layers, "
               "residual connections, normalisation (BatchNorm/LayerNorm), He/Xavier init, or fewer layers.")
        findings.append(Finding("vanishing", "warning", msg, params=params, modules=[e["layer"] for e in low],
                                nodes=[f"param:{p}" for p in params],
                                data={"layer_norms": data_norms, "min_ratio": min(e["norm"] for e in low) / biggest,
                                      "largest_layer": layers[top]["layer"]}))
    return findings


NEAR_ZERO = 1e-4          # a weight this small scales the gradient behind it down to almost nothing
_MULTIPLY = {"mul", "mul_", "__mul__", "__rmul__", "__imul__"}


def zero_weights(probe: Probe) -> list[tuple[str, float, float]]:
    """(name, forward order, max |value|) of trainable weights at (almost) zero by design: an all-zero
    matrix (a zero-initialised head) or a near-zero scale multiplied in (ConvNeXt's layer scale, 1e-6).
    One-dimensional parameters count only when every use is a multiplication (a zero bias is not this)."""
    cap = probe.capture
    out = []
    for name, p in probe.model.named_parameters():
        if not p.requires_grad or p.numel() < 2:
            continue
        top = float(p.detach().abs().max())
        if top > NEAR_ZERO:
            continue
        uses = cap.param_uses.get(name, []) if cap is not None else []
        if not uses or (p.dim() < 2 and not all(u.call in _MULTIPLY for u in uses)):
            continue
        out.append((name, uses[0].seq, top))
    return out


def _split_zero_init(probe: Probe, layers: list[dict], low: list[dict]) -> tuple[dict | None, list[dict]]:
    """Layers whose tiny gradient a (near-)zero weight after them explains, and the rest."""
    if not low:
        return None, low
    zeros = zero_weights(probe)
    if not zeros:
        return None, low
    exact = all(top == 0.0 for _, _, top in zeros)
    last = max(order for _, order, _ in zeros)
    explained = [e for e in low if e["order"] < last and (e["norm"] == 0.0 or not exact)]
    if not explained:
        return None, low
    rest = [e for e in low if e not in explained]
    return {"weights": [n for n, _, _ in zeros], "max_abs": max(top for _, _, top in zeros), "exact": exact,
            "layers": explained}, rest


def _zero_init_finding(zero: dict, data_norms: dict) -> Finding:
    weights, layers = zero["weights"], zero["layers"]
    params = [p for e in layers for p in e["params"]]
    one = len(weights) == 1
    if zero["exact"]:
        what = (f"{fmt_params(weights)} {'is' if one else 'are'} all zeros, so the gradient flowing back through "
                f"{'it' if one else 'them'} is exactly zero and the {len(layers)} layer(s) before "
                f"{'it' if one else 'them'} (`{layers[0]['layer']}`...) get a zero gradient at step 0")
        design = "some architectures initialise a head to zeros by design"
    else:
        what = (f"{fmt_params(weights)} {'is' if one else 'are'} near zero (|value| <= {fmt_num(zero['max_abs'])}) "
                f"and {'multiplies' if one else 'multiply'} what comes before, so the {len(layers)} layer(s) before "
                f"{'it' if one else 'them'} (`{layers[0]['layer']}`...) get gradients scaled down as much")
        design = "a near-zero scale is a deliberate init (e.g. ConvNeXt's layer scale, 1e-6) that starts each block "\
                 "close to the identity"
    msg = (f"Zero-initialised weight: {what}. This is not vanishing gradients: {design}; the scale's own gradient "
           "is not small, so the updates grow it and the gradients reach every layer. Run gradviz check --steps K "
           "to judge after the updates.")
    return Finding("zero-init", "info", msg, params=weights + params, modules=[e["layer"] for e in layers],
                   nodes=[f"param:{p}" for p in weights],
                   data={"zero_weights": weights, "max_abs": zero["max_abs"], "exact_zero": zero["exact"],
                         "layers": [e["layer"] for e in layers], "layer_norms": data_norms})


def global_norm(params) -> float:
    sq = 0.0
    for p in params:
        if p.grad is not None:
            n = float(torch.linalg.vector_norm(norm_values(p.grad.detach()).double()))
            sq += n * n
    return math.sqrt(sq)


NORMS = Check("gradient norms", ("exploding", "vanishing", "zero-init"),
              lambda ctx: norm_findings(ctx.probe, skip_zero=ctx.has("dead-relu")),
              needs=("backward", "finite"), reads=("dead-relu",))
