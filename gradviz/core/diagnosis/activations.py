"""``dead-relu`` and ``saturated-sigmoid`` from the activation statistics of one batch.

Dead ReLU: a unit (feature / channel) whose output is 0 for every sample of the batch
passes no gradient; when most of a layer's units are dead, the layers before it get
(almost) nothing. Saturated sigmoid/tanh: the "effective gradient rate" is the share
of elements where the derivative is still useful: sigmoid'(x) > 0.05 (a fifth of its
0.25 maximum, i.e. |x| < ~2.9); for tanh, whose derivative 1 - tanh^2 = 4 sigmoid'(2x)
peaks at 1, the same fifth-of-the-maximum cut-off is 1 - tanh^2 > 0.2. Below one half
is the early warning.
"""
from __future__ import annotations

import os

from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding, fmt_params
from gradviz.core.diagnosis.diagnostic_capture import Activation
from gradviz.core.diagnosis.probe import Probe

DEAD_FRACTION = 0.5        # "most of a layer's units"
MIN_SAMPLES = 8            # fewer values per unit say nothing about "always zero"
RATE_THRESHOLD = 0.5


def _worst(records: list[Activation], key) -> list[Activation]:
    """One record per (module, location, kind): the worst call."""
    best: dict[tuple, Activation] = {}
    for r in records:
        k = (r.module, r.location, r.kind)
        if k not in best or key(r) > key(best[k]):
            best[k] = r
    return list(best.values())


def _where(r: Activation) -> str:
    name = f"`{r.module}`" if r.module else "the model"
    loc = f" at {os.path.basename(r.location.rpartition(':')[0])}:{r.location.rpartition(':')[2]}" \
        if r.location else ""
    return f"{name} ({r.call}{loc})"


def dead_relu_findings(probe: Probe) -> list[Finding]:
    cap = probe.capture
    if cap is None:
        return []
    dead = [r for r in cap.activations
            if r.kind == "relu" and r.samples >= MIN_SAMPLES and r.units >= 2 and r.dead_frac >= DEAD_FRACTION]
    zero_params = [n for n, g in probe.grads.items() if g is not None and g.numel() and not bool(g.any())]
    findings = []
    for r in sorted(_worst(dead, lambda r: r.dead_frac), key=lambda r: r.seq):
        nid = probe.node_id(r.node)
        pct = round(100 * r.dead_frac)
        msg = (f"Dead ReLU: {pct}% of the {r.units} units of {_where(r)} output 0 for every one of the "
               f"{r.samples} samples in the batch ({100 * r.zero_frac:.0f}% of all its outputs are 0). A dead "
               "unit passes no gradient, so the weights before it stop learning")
        if zero_params:
            msg += f" ({fmt_params(zero_params)} get an all-zero gradient)"
        msg += (". Usual causes: a large negative bias, a bad initialisation or a too-high learning rate "
                "that pushed the weights negative. Fixes: He/Kaiming init with a zero (or small positive) "
                "bias, a lower learning rate, normalisation before the ReLU, or LeakyReLU/GELU; also check "
                "the input data's scale.")
        findings.append(Finding(
            "dead-relu", "warning", msg, params=zero_params, modules=[r.module] if r.module else [],
            nodes=[nid] if nid else [], location=r.location or None,
            data={"dead_fraction": r.dead_frac, "zero_fraction": r.zero_frac, "units": r.units,
                  "samples": r.samples, "shape": r.shape}))
    return findings


def saturated_findings(probe: Probe) -> list[Finding]:
    cap = probe.capture
    if cap is None:
        return []
    sat = [r for r in cap.activations if r.kind in ("sigmoid", "tanh") and r.rate < RATE_THRESHOLD]
    findings = []
    for r in sorted(_worst(sat, lambda r: -r.rate), key=lambda r: r.seq):
        nid = probe.node_id(r.node)
        deriv = "sigmoid'(x) > 0.05" if r.kind == "sigmoid" else "1 - tanh(x)^2 > 0.2"
        msg = (f"Saturated {r.kind}: only {100 * r.rate:.0f}% of the outputs of {_where(r)} are in the range "
               f"where the derivative is useful ({deriv}); the rest sit near "
               f"{'0 or 1' if r.kind == 'sigmoid' else '-1 or 1'}, where almost no gradient passes (an effective "
               "gradient rate below 50% is the early warning, before the loss shows anything). Usually the "
               "pre-activations are too large: use the default/Xavier init (std about 1/sqrt(fan_in)), "
               "normalise the inputs or add BatchNorm/LayerNorm before it, or use ReLU/GELU in hidden layers.")
        findings.append(Finding(
            "saturated-sigmoid", "warning", msg, modules=[r.module] if r.module else [],
            nodes=[nid] if nid else [], location=r.location or None,
            data={"kind": r.kind, "effective_rate": r.rate, "shape": r.shape}))
    return findings


DEAD_RELU = Check("dead ReLUs", ("dead-relu",), lambda ctx: dead_relu_findings(ctx.probe), needs=("forward",))
SATURATED = Check("saturated sigmoid/tanh", ("saturated-sigmoid",), lambda ctx: saturated_findings(ctx.probe),
                  needs=("forward",))
