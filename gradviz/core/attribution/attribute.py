"""Input attribution: which parts of the input the chosen output depends on.

Three methods, as seed 002 §6.1 describes them:

- ``saliency``: ``|∂f/∂x|`` at the real input;
- ``grad-x-input``: ``x · ∂f/∂x`` (signed);
- ``ig`` (integrated gradients): ``(x − x') · ∫₀¹ ∂f/∂x(x' + α(x − x')) dα`` from a
  baseline ``x'`` (zeros, a constant, or tensors you give), with the integral taken by
  Gauss–Legendre quadrature on ``steps`` points. Its *completeness* check — the
  attributions sum to ``f(x) − f(x')`` — is computed and reported, never assumed.

``f`` is the script's loss, or one output unit, or each example's label / predicted
class (``attribution_paths.Objective``), summed over the batch. The model runs in eval
mode (dropout off, BatchNorm on running statistics) so that each example's attribution
depends on that example only. Integer inputs (token ids) are attributed through the
output of the embedding that looks them up: one number per position.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from gradviz.core.attribution.paths import AttributionError, EmbeddingPath, Objective, PathPoint

log = logging.getLogger(__name__)

METHODS = ("ig", "saliency", "grad-x-input")
TOLERANCE = 0.01          # completeness: |sum − Δf| within 1 % of |Δf|
Baseline = Any            # "zeros" | float | tensor | sequence of tensors (one per input)
Progress = Callable[[int, int], None]   # (passes done, passes in all); may raise to stop

__all__ = ["METHODS", "AttributionError", "AttributionResult", "InputAttribution", "Completeness",
           "attribute", "attribute_batch", "input_kind"]


@dataclass
class InputAttribution:
    """The attribution of one input of the batch, shaped like that input (token ids: like the ids)."""

    index: int
    shape: list[int]
    dtype: str
    kind: str                       # image | sequence | tokens | tabular | tensor
    attribution: np.ndarray | None  # None: this input does not reach f (``note`` says why)
    values: np.ndarray              # the input itself (ids for tokens), for drawing
    through: str = ""               # integer inputs: the embedding module they were attributed through
    note: str = ""


@dataclass
class Completeness:
    attribution_sum: float
    output_delta: float             # f(x) − f(baseline)
    rel_error: float

    @property
    def ok(self) -> bool:
        return self.rel_error <= TOLERANCE


@dataclass
class AttributionResult:
    method: str
    target: str
    inputs: list[InputAttribution]
    output: float                   # f at the real input
    completeness: Completeness | None = None
    baseline_output: float | None = None
    steps: int = 0
    baseline: str = ""
    mode: str = "eval"
    seconds: float = 0.0
    script: str = ""
    step: int = 0
    passes: int = 0                 # forward + backward passes it took

    def to_json(self) -> dict:
        """The JSON of ``gradviz attribute -o out.json`` (see ``gradviz attribute --help``)."""
        from gradviz.core.runtime.formatting import json_safe

        data: dict[str, Any] = {
            "method": self.method, "target": self.target, "script": self.script, "step": self.step,
            "output": self.output, "mode": self.mode,
            "inputs": [{"index": a.index, "shape": a.shape, "dtype": a.dtype, "kind": a.kind,
                        "through": a.through or None, "note": a.note or None,
                        "attribution": None if a.attribution is None else a.attribution.tolist()}
                       for a in self.inputs],
            "completeness": None,
        }
        if self.method == "ig":
            data.update(steps=self.steps, baseline=self.baseline, baseline_output=self.baseline_output)
        if self.completeness is not None:
            c = self.completeness
            data["completeness"] = {"attribution_sum": c.attribution_sum, "output_delta": c.output_delta,
                                    "rel_error": c.rel_error, "tolerance": TOLERANCE, "ok": c.ok}
        return json_safe(data)


def input_kind(shape: Sequence[int], integer: bool) -> str:
    """How an input is drawn: (N, C, H, W) image; integer ids tokens; (N, T, F) sequence;
    (N, F) or (N,) tabular; anything else a flat tensor."""
    if integer:
        return "tokens"
    return {4: "image", 3: "sequence", 2: "tabular", 1: "tabular"}.get(len(shape), "tensor")


# -- entry points ---------------------------------------------------------------------------

def attribute(source: Any, *, method: str = "ig", target: str | int = "loss", steps: int = 50,
              baseline: Baseline = "zeros", step: int = 0, seed: int | None = 0,
              device: str | None = None, progress: Progress | None = None) -> AttributionResult:
    """Attribute a model script's batch ``batch(step)`` (``source``: a path or a ``ModelScript``).

    The model is built as ``trace`` builds it (same seed), then put in eval mode.
    ``progress(done, total)`` is called after each pass (it may raise to cancel).
    """
    from gradviz.core.script.load import ModelScript, load_script

    from gradviz.core.script.run import prepare

    script = source if isinstance(source, ModelScript) else load_script(source)
    run = prepare(script, step=step, seed=seed, device=device, input_grads=False)
    result = attribute_batch(run.model, run.inputs, run.targets, Objective(script, _parse_target(target)),
                             method=method, steps=steps, baseline=baseline, progress=progress)
    result.script, result.step = str(script.path), step
    return result


def _parse_target(target: str | int | None) -> str | int:
    if target is None:
        return "loss"
    if isinstance(target, int):
        return target
    text = str(target).strip()
    if text in ("loss", "label", "pred"):
        return text
    try:
        return int(text)
    except ValueError:
        raise AttributionError(f"--target takes an output index, 'loss', 'label' or 'pred', not {target!r}") from None


def attribute_batch(model: nn.Module, inputs: tuple, targets: Any,
                    objective: Callable[[nn.Module, tuple, Any], torch.Tensor], *, method: str = "ig",
                    steps: int = 50, baseline: Baseline = "zeros", progress: Progress | None = None
                    ) -> AttributionResult:
    """Attribute ``objective(model, inputs, targets)`` (a scalar tensor) to ``inputs``."""
    if method not in METHODS:
        raise AttributionError(f"unknown method {method!r} (use one of {', '.join(METHODS)})")
    if method == "ig" and not 1 <= int(steps) <= 10_000:
        raise AttributionError(f"--steps must be between 1 and 10000, not {steps}")
    start = time.perf_counter()
    was_training = model.training
    model.eval()
    try:
        path = _Path(model, tuple(inputs), targets, objective, baseline)
        path.progress = progress
        path.total = int(steps) + 2 if method == "ig" else 1
        if method == "ig":
            result = _integrated(path, int(steps))
        else:
            result = _local(path, method)
    finally:
        model.train(was_training)
    result.target = objective.describe() if isinstance(objective, Objective) else \
        getattr(objective, "__name__", "objective")
    result.mode = "eval"
    result.seconds = time.perf_counter() - start
    result.passes = path.passes
    return result


# -- the straight path from the baseline to the input ---------------------------------------

class _Path:
    """Runs the objective at points ``baseline + alpha (input - baseline)`` of the path."""

    def __init__(self, model: nn.Module, inputs: tuple, targets: Any, objective: Callable, baseline: Baseline):
        self.model, self.inputs, self.targets, self.objective = model, inputs, targets, objective
        self.float_idx = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)
                          and (t.is_floating_point() or t.is_complex())]
        int_inputs = {i: t for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)
                      and i not in self.float_idx and t.dtype != torch.bool}
        self.base, base_ids, self.baseline_text = _baselines(inputs, self.float_idx, int_inputs, baseline)
        owners = {id(p): name.rpartition(".")[0] for name, p in model.named_parameters()}
        self.tap = EmbeddingPath(int_inputs, base_ids, owners) if int_inputs else None
        self.passes = 0
        self.total = 1
        self.progress: Progress | None = None

    def point(self, alpha: float, grads: bool = True) -> PathPoint:
        moved = list(self.inputs)
        leaves: dict[int, torch.Tensor] = {}
        for i in self.float_idx:
            x = self.inputs[i].detach()
            b = self.base[i]
            leaves[i] = moved[i] = (b + alpha * (x - b)).requires_grad_(True)
        with torch.enable_grad():
            if self.tap is not None:
                self.tap.begin(alpha)
                with self.tap:
                    f = self.objective(self.model, tuple(moved), self.targets)
                self._check_calls()
            else:
                f = self.objective(self.model, tuple(moved), self.targets)
        self.passes += 1
        if self.progress is not None:
            self.progress(self.passes, self.total)
        if not isinstance(f, torch.Tensor) or f.numel() != 1:
            raise AttributionError(f"the attributed output must be a scalar tensor, got "
                                   f"{getattr(f, 'shape', type(f).__name__)}")
        point = PathPoint(float(f.detach().float().item()))
        if not grads:
            return point
        calls = self.tap.calls if self.tap is not None else []
        wrt = [leaves[i] for i in self.float_idx] + [c.output for c in calls]
        got: Sequence[torch.Tensor | None] = [None] * len(wrt)
        if wrt and f.requires_grad:
            got = torch.autograd.grad(f, wrt, allow_unused=True)
        got = [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, got)]
        n = len(self.float_idx)
        point.input_grads = {i: g.detach() for i, g in zip(self.float_idx, got[:n])}
        point.embedding_grads = [g.detach() for g in got[n:]]
        return point

    def _check_calls(self) -> None:
        if len(self.tap.calls) != len(self.tap.seen):
            raise AttributionError(
                f"the model looked up the token ids {len(self.tap.calls)} times in one forward and "
                f"{len(self.tap.seen)} times in another: attribution through the embedding needs the same "
                "lookups on every forward")


def _baselines(inputs: tuple, float_idx: list[int], int_inputs: dict[int, torch.Tensor], baseline: Baseline):
    """Baseline tensors for the float inputs, baseline ids for the integer ones, and a description.

    "zeros": zero inputs and zero embedding vectors; a number c: inputs filled with c and
    token id c; tensors (one per input, or one for a single input): used as given."""
    base: dict[int, torch.Tensor] = {}
    base_ids: dict[int, torch.Tensor] = {}
    if isinstance(baseline, str) and baseline == "zeros":
        return {i: torch.zeros_like(inputs[i]) for i in float_idx}, base_ids, "zeros"
    if isinstance(baseline, (int, float)) and not isinstance(baseline, bool):
        for i in float_idx:
            base[i] = torch.full_like(inputs[i], float(baseline))
        for i, t in int_inputs.items():
            base_ids[i] = torch.full_like(t, int(baseline))
        return base, base_ids, f"constant {baseline:g}"
    given = [baseline] if isinstance(baseline, torch.Tensor) else list(baseline) \
        if isinstance(baseline, (list, tuple)) else None
    if given is None:
        raise AttributionError(f"the baseline must be 'zeros', a number or tensors, not {type(baseline).__name__}")
    if len(given) != len(inputs):
        raise AttributionError(f"the baseline has {len(given)} tensors for {len(inputs)} inputs")
    for i, (b, x) in enumerate(zip(given, inputs)):
        if not isinstance(x, torch.Tensor):
            continue
        b = torch.as_tensor(b)
        if list(b.shape) != list(x.shape):
            try:
                b = b.expand_as(x)
            except RuntimeError:
                raise AttributionError(f"baseline {i} has shape {list(b.shape)}, input {i} has "
                                       f"{list(x.shape)}") from None
        if i in float_idx:
            base[i] = b.to(device=x.device, dtype=x.dtype)
        elif i in int_inputs:
            base_ids[i] = b.to(device=x.device, dtype=x.dtype)
    return base, base_ids, "given tensors"


# -- the methods ----------------------------------------------------------------------------

def _local(path: _Path, method: str) -> AttributionResult:
    """Saliency and gradient × input: one forward and backward at the real input."""
    p = path.point(1.0)
    floats: dict[int, torch.Tensor] = {}
    for i, g in p.input_grads.items():
        floats[i] = g.abs() if method == "saliency" else g * path.inputs[i].detach()
    tokens: dict[int, torch.Tensor] = {}
    for call, g in zip(path.tap.calls if path.tap else [], p.embedding_grads):
        per_pos = g.norm(dim=-1) if method == "saliency" else (g * call.real).sum(-1)
        tokens[call.input_index] = tokens.get(call.input_index, 0) + per_pos
    return AttributionResult(method, "", _input_results(path, floats, tokens), p.value)


def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of n-point Gauss–Legendre quadrature on [0, 1]."""
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


def _integrated(path: _Path, steps: int) -> AttributionResult:
    real = path.point(1.0, grads=False)      # first: fixes 'pred' classes and the embedding lookups
    base = path.point(0.0, grads=False)
    alphas, weights = gauss_legendre(steps)
    acc: dict[int, torch.Tensor] = {i: torch.zeros_like(path.inputs[i], dtype=torch.float64) for i in path.float_idx}
    emb_acc: list[torch.Tensor] = []
    for alpha, w in zip(alphas.tolist(), weights.tolist()):
        p = path.point(alpha)
        for i, g in p.input_grads.items():
            acc[i] += w * g.double()
        for k, g in enumerate(p.embedding_grads):
            if k == len(emb_acc):
                emb_acc.append(torch.zeros_like(g, dtype=torch.float64))
            emb_acc[k] += w * g.double()
    floats = {i: (path.inputs[i].detach().double() - path.base[i].double()) * acc[i] for i in path.float_idx}
    tokens: dict[int, torch.Tensor] = {}
    for call, g in zip(path.tap.seen if path.tap else [], emb_acc):
        per_pos = ((call.real.double() - call.base.double()) * g).sum(-1)
        tokens[call.input_index] = tokens.get(call.input_index, 0) + per_pos
    total = sum(float(a.sum()) for a in floats.values()) + sum(float(a.sum()) for a in tokens.values())
    delta = real.value - base.value
    rel = abs(total - delta) / max(abs(delta), 1e-12)
    if abs(total - delta) <= 1e-7 * max(1.0, abs(real.value), abs(base.value)):
        rel = 0.0 if abs(delta) < 1e-12 else rel   # both negligible: nothing to attribute, nothing missed
    result = AttributionResult("ig", "", _input_results(path, floats, tokens), real.value,
                               Completeness(total, delta, rel), base.value, steps, path.baseline_text)
    if not result.completeness.ok:
        log.info("integrated gradients: completeness off by %.2f %% with %d steps", 100 * rel, steps)
    return result


def _input_results(path: _Path, floats: dict[int, torch.Tensor], tokens: dict[int, torch.Tensor]
                   ) -> list[InputAttribution]:
    out = []
    for i, x in enumerate(path.inputs):
        if not isinstance(x, torch.Tensor):
            continue
        integer = i not in path.float_idx
        values = x.detach().cpu()
        entry = InputAttribution(i, list(x.shape), str(x.dtype).replace("torch.", ""),
                                 input_kind(x.shape, integer), None,
                                 values.numpy() if integer else values.float().numpy())
        if i in floats:
            entry.attribution = floats[i].detach().cpu().double().numpy()
        elif i in tokens:
            entry.attribution = tokens[i].detach().cpu().double().numpy()
            owners = sorted({c.module for c in path.tap.seen if c.input_index == i})
            entry.through = ", ".join(o or "F.embedding" for o in owners)
        else:
            entry.note = ("an integer input that no embedding lookup takes: it cannot be attributed"
                          if integer else "")
        out.append(entry)
    return out
