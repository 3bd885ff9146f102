"""Per-step training statistics: gradient norms, weight norms, update ratios, one host pass.

``StepStats`` sits around the optimizer step of any training loop::

    stats = StepStats(model.named_parameters())
    stats.begin()                                  # start of the step (timer)
    loss.backward()
    stats.grads_ready(max_norm=1.0)                # per-param grad norms, clipping, snapshot of theta
    optimizer.step()
    stats.after_update()                           # ||delta theta|| per parameter
    row = stats.finish(loss, lr=optimizer.param_groups[0]["lr"])     # a StepRow

How the norms are reduced is one strategy object, chosen once from the parameters
(``gradviz.core.stats.norm_strategies.make_strategy``): ``host`` (numpy/BLAS dot products on views of
CPU tensors), ``native`` (the same in one C++ call, ``gradviz.core.native``), ``device``
(``torch._foreach_norm``, no host sync until the numbers are read) or ``sharded`` (``DTensor``
parameters: whole-tensor norms from the local pieces, one collective per step). A strategy returns the
step's measured numbers as a ``StepNumbers``; turning those into arrays is one function,
``step_columns``, for one row or many (the training window and the recorder convert batches).

A ``StepRow`` holds ``step``, ``loss``, ``lr``, ``step_time``, ``node_norms``/``node_detail``
(sampled steps of the trainer) and the derived statistics, computed when first read:

- ``grad_norm``: global L2 norm of all gradients before clipping (what
  ``torch.nn.utils.clip_grad_norm_`` returns)
- ``grad_norm_clipped``: global norm after clipping (== ``grad_norm`` without clipping)
- ``param_norms``: per-parameter gradient norms before clipping, ``p.grad.norm()``;
  NaN where ``p.grad`` is None (see ``has_grad``)
- ``param_norms_clipped``: per-parameter gradient norms after clipping (what the optimizer
  got): measured after adaptive clipping, else ``param_norms`` times the global coefficient
- ``has_grad``: bool array, False where ``p.grad`` was None
- ``weight_norms``: per-parameter ``||theta||`` before the update (NaN: not measured)
- ``update_ratios``: per-parameter ``||theta_after - theta_before|| / ||theta_before||``
  (NaN when not measured; ``inf`` for an all-zero parameter that moved)
- ``nonfinite``: how many parameters have a NaN/Inf gradient norm
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from gradviz.core.stats.adaptive_clip import AdaptiveClip, clip_after_adaptive
from gradviz.core.stats.norm_strategies import STRATEGIES, make_strategy
from gradviz.core.stats.step_numbers import NormStrategy, StepNumbers, settle_numbers
from gradviz.core.stats.tied_grads import fold_ties, split_ties

__all__ = ["StepStats", "StepNumbers", "StepRow", "step_columns", "STRATEGIES", "ROW_KEYS"]

_NAN = float("nan")

ROW_KEYS = ("loss", "grad_norm", "grad_norm_clipped", "param_norms", "param_norms_clipped", "has_grad",
            "weight_norms", "update_ratios", "lr", "step_time", "nonfinite")


class StepStats:
    """Batched per-step statistics of a fixed list of named parameters.

    Only parameters with ``requires_grad`` are tracked. ``track_updates=False`` skips the
    snapshot of the weights (saves one copy of the parameters and two passes per step);
    ``update_ratios`` are then NaN. ``strategy``: ``None`` (the fastest that fits the
    parameters) or one of ``STRATEGIES`` to force one (tests compare them).
    """

    def __init__(self, named_parameters: Iterable[tuple[str, torch.Tensor]], *, track_updates: bool = True,
                 strategy: str | None = None) -> None:
        # parameters over the same bytes are one (gradviz.core.stats.tied_grads): the first name is tracked
        pairs, self.tied = split_ties([(n, p) for n, p in named_parameters if p.requires_grad])
        self.names: list[str] = [n for n, _ in pairs]
        self.params: list[torch.Tensor] = [p for _, p in pairs]
        self.n = len(self.params)
        self.track_updates = track_updates
        self.norms: NormStrategy = make_strategy(self.params, strategy)
        self.device: torch.device = self.norms.device
        self._numbers: StepNumbers | None = None
        self._updates_now = False
        self._t0 = time.perf_counter()
        self.adaptive_seconds = 0.0     # time the last grads_ready spent clipping adaptively (not update ratios')

    @property
    def strategy(self) -> str:
        """``host``, ``native``, ``device`` or ``sharded`` (DTensor parameters): how the norms are reduced."""
        return self.norms.name

    def begin(self) -> None:
        """Mark the start of a step (for ``step_time``) and forget the last one."""
        self._t0 = time.perf_counter()
        self._numbers = None

    def grads_ready(self, max_norm: float | None = None, updates: bool = True,
                    adaptive: AdaptiveClip | None = None) -> torch.Tensor | None:
        """Call after backward (and after ``GradScaler.unscale_``), before ``optimizer.step()``.

        Measures every gradient norm (and, when update ratios are due, every weight norm and
        a snapshot of the weights), clipping when ``max_norm`` is given exactly as
        ``clip_grad_norm_`` does (coefficient ``max_norm / (total + 1e-6)`` clamped to 1).
        ``adaptive``: per-layer adaptive clipping (``gradviz.core.stats.adaptive_clip``) first, then
        the global clip of what it left; the row's ``param_norms_clipped`` are then measured.
        Returns the global norm the global clip saw, as a tensor, when clipping, else None.
        ``updates=False`` skips the update ratios for this step (NaN in the row).
        """
        self._updates_now = self.track_updates and updates
        if adaptive is None and self.tied and self.strategy != "sharded":
            self.adaptive_seconds = 0.0
            return self._measure_tied(max_norm)
        if adaptive is None:
            self.adaptive_seconds = 0.0
            self._numbers, total = self.norms.measure(max_norm, self._updates_now)
            return total
        self._numbers, _ = self.norms.measure(None, self._updates_now)     # the norms before clipping
        t0 = time.perf_counter()
        clipped = adaptive.apply(self.params)
        total = None
        if max_norm is not None and clipped:
            total, clipped = clip_after_adaptive(self.params, clipped, max_norm)
            self._numbers.max_norm = float(max_norm)
        self._numbers.clipped = clipped
        self.adaptive_seconds = time.perf_counter() - t0
        return total

    def _measure_tied(self, max_norm: float | None) -> torch.Tensor | None:
        """``grads_ready`` with tied groups: their summed gradients' norms, each counted once; a clip
        scales every object's gradient by the coefficient of that total, as ``clip_grad_norm_`` does."""
        self._numbers, _ = self.norms.measure(None, self._updates_now)
        fold_ties(self._numbers, self.params, self.tied, self.device)
        if max_norm is None:
            return None
        norms = self._numbers.values[:self._numbers.n_grads]
        total = torch.tensor(sum(norms) ** 0.5 if self._numbers.squared else
                             float(torch.linalg.vector_norm(torch.stack([t.float() for t in norms]))) if norms else 0.0)
        grads = [p for group in self.groups() for p in group if p.grad is not None]
        if grads:
            torch.nn.utils.clip_grads_with_norm_(grads, max_norm, total.to(grads[0].grad.device), foreach=None)
        self._numbers.max_norm = float(max_norm)
        return total

    def groups(self) -> list[list[torch.Tensor]]:
        """Every object of each tracked parameter (the first, then those over the same bytes)."""
        return [[p, *(q for _, q in self.tied.get(i, ()))] for i, p in enumerate(self.params)]

    def named_all(self) -> tuple[list[str], list[torch.Tensor]]:
        """Every name and object given (the tracked ones, then the others over their bytes)."""
        others = [pair for i in sorted(self.tied) for pair in self.tied[i]]
        return self.names + [n for n, _ in others], self.params + [q for _, q in others]

    def tie_names(self) -> list[list[str]]:
        """The names of each tracked parameter tied by storage to other objects (its first name first)."""
        return [[self.names[i], *(n for n, _ in others)] for i, others in sorted(self.tied.items())]

    def use_grad_norms(self, norms: Sequence[torch.Tensor | None], max_norm: float | None) -> bool:
        """Replace the gradient norms ``grads_ready`` measured by ``norms`` (one 0-d tensor per
        parameter, None = no gradient), measured earlier from the same gradients before something
        (a trainer's clip) scaled them; ``max_norm``: that clip's threshold, from which the row's
        clipped norms follow. The weight norms and the snapshot stay as measured. Returns False (the
        measured norms stay) when ``norms`` do not cover exactly the gradients present now."""
        numbers = self._numbers
        if numbers is None or numbers.settle is not None or len(norms) != self.n:
            return False
        have = tuple(i for i, t in enumerate(norms) if t is not None)
        if have != (numbers.present if numbers.present is not None else tuple(range(self.n))):
            return False
        values = numbers.values
        with torch.no_grad():
            if numbers.squared:
                for k, i in enumerate(have):
                    values[k] = float(norms[i]) ** 2
            else:
                like = values[0] if have else None
                for k, i in enumerate(have):
                    values[k] = norms[i].to(device=like.device, dtype=like.dtype)
        numbers.max_norm = None if max_norm is None else float(max_norm)
        return True

    def after_update(self) -> None:
        """Call after ``optimizer.step()``: the per-parameter norms of the update."""
        if self._updates_now and self._numbers is not None:
            self.norms.measure_update(self._numbers)

    def restore_weights(self) -> bool:
        """Put back the weights from before the last update (e.g. after a NaN loss).

        Only possible between ``grads_ready`` and the next step, with updates tracked;
        returns False when there is nothing to restore.
        """
        return self._updates_now and self.norms.restore()

    def numbers(self) -> StepNumbers:
        """The step's measured numbers, no host work (for consumers that convert many rows at once)."""
        if self._numbers is None:
            raise RuntimeError("grads_ready() was not called for this step")
        return self._numbers

    def elapsed(self) -> float:
        """Seconds since ``begin()``."""
        return time.perf_counter() - self._t0

    def finish(self, loss: Any, lr: float | None = None, step: int = 0) -> "StepRow":
        """The step's row (its statistics are computed when first read)."""
        return StepRow(step=step, loss=loss_value(loss), lr=_NAN if lr is None else float(lr),
                       step_time=self.elapsed(), numbers=self.numbers())


def loss_value(loss: Any) -> float:
    """A host float of a loss given as a tensor, a number or None (NaN)."""
    if isinstance(loss, torch.Tensor):
        return loss.item()                # (a one-element tensor of any shape; a Python float)
    return _NAN if loss is None else float(loss)


@dataclass(eq=False)
class StepRow:
    """One optimizer step's statistics (see the module docstring for each field)."""

    step: int
    loss: float
    lr: float
    step_time: float
    numbers: StepNumbers = field(repr=False)
    node_norms: dict | None = None          # {node id: norm or None} on the trainer's sampled steps
    node_detail: dict | None = None         # full statistics of the trainer's detail node (sampled steps)
    _derived: dict | None = field(default=None, init=False, repr=False)

    def _get(self, key: str):
        if self._derived is None:
            self._derived = {k: v[0] for k, v in step_columns([self.numbers]).items()}
        return self._derived[key]

    @property
    def grad_norm(self) -> float:
        return float(self._get("grad_norm"))

    @property
    def grad_norm_clipped(self) -> float:
        return float(self._get("grad_norm_clipped"))

    @property
    def nonfinite(self) -> int:
        return int(self._get("nonfinite"))

    @property
    def param_norms(self) -> np.ndarray:
        return self._get("param_norms")

    @property
    def param_norms_clipped(self) -> np.ndarray:
        return self._get("param_norms_clipped")

    @property
    def has_grad(self) -> np.ndarray:
        return self._get("has_grad")

    @property
    def weight_norms(self) -> np.ndarray:
        return self._get("weight_norms")

    @property
    def update_ratios(self) -> np.ndarray:
        return self._get("update_ratios")

    def as_dict(self) -> dict[str, Any]:
        """Every field and derived statistic as a plain dict (no ``numbers``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("numbers", "_derived")}
        out.update({k: getattr(self, k) for k in ROW_KEYS})
        return out


def _layout(s: StepNumbers) -> tuple:   # (what fixes where each value of ``values`` goes)
    return (s.squared, s.n_grads, s.present, len(s.values), s.weights, s.deltas)


def step_columns(steps: Sequence[StepNumbers]) -> dict[str, np.ndarray]:
    """Arrays of the statistics of many steps (one row each), in one pass per layout.

    Returns float64 ``param_norms`` (R x n, NaN = no gradient), bool ``has_grad``,
    ``grad_norm`` and ``grad_norm_clipped`` (R; NaN/inf propagate like torch's global norm),
    ``param_norms_clipped`` (R x n, after every clip),
    int64 ``nonfinite`` (R), ``weight_norms``, ``update_norms`` and ``update_ratios``
    (R x n, NaN = not measured). Device numbers are stacked and copied to the host once
    per layout. All steps must measure the same parameters (same ``n``).
    """
    settle_numbers(steps)                              # (sharded runs: collectives still in flight)
    r_count = len(steps)
    n = steps[0].n if steps else 0
    if any(s.n != n for s in steps):
        raise ValueError("step_columns: steps of different parameter lists")
    norms = np.full((r_count, n), _NAN)
    weights = np.full((r_count, n), _NAN)
    deltas = np.full((r_count, n), _NAN)
    has = np.ones((r_count, n), dtype=bool)
    total_sq = np.zeros(r_count)
    first = _layout(steps[0]) if steps else None
    if all(_layout(s) == first for s in steps):        # the usual case: one layout for every row
        groups = {first: list(range(r_count))} if steps else {}
    else:
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(steps):
            groups.setdefault(_layout(s), []).append(i)
    for (squared, g, present, length, with_weights, with_deltas), idx in groups.items():
        rows = np.asarray(idx, dtype=np.intp)
        sq, block = _host_block([steps[i].values for i in idx], squared, length)
        total_sq[rows] = sq[:, :g].sum(axis=1)
        if present is None:
            norms[rows] = block[:, :g]
        else:
            cols = np.asarray(present, dtype=np.intp)
            has[rows] = False
            if g:
                norms[np.ix_(rows, cols)] = block[:, :g]
                has[np.ix_(rows, cols)] = True
        if with_weights:
            weights[rows] = block[:, g:g + n]
            if with_deltas:
                deltas[rows] = block[:, g + n:g + 2 * n]
    grad_norm = np.sqrt(total_sq)
    nonfinite = np.count_nonzero(~np.isfinite(norms) & has, axis=1).astype(np.int64)
    max_norm = np.array([_NAN if s.max_norm is None else s.max_norm for s in steps], dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        coef = np.minimum(1.0, max_norm / (grad_norm + 1e-6))
        global_clip = np.isfinite(max_norm) & np.isfinite(grad_norm)
        clipped = np.where(global_clip, grad_norm * coef, grad_norm)
        per_param = np.where(global_clip[:, None], norms * coef[:, None], norms)
        ratios = deltas / weights
    adaptive = [i for i, s in enumerate(steps) if s.clipped is not None]
    if adaptive:
        clipped[adaptive] = _adaptive_columns([steps[i] for i in adaptive], per_param, adaptive)
    return {"param_norms": norms, "has_grad": has, "grad_norm": grad_norm, "grad_norm_clipped": clipped,
            "param_norms_clipped": per_param, "nonfinite": nonfinite, "weight_norms": weights,
            "update_norms": deltas, "update_ratios": ratios}


def _adaptive_columns(steps: Sequence[StepNumbers], per_param: np.ndarray, rows: list[int]) -> np.ndarray:
    """Writes the measured post-clip norms of adaptively clipped steps into ``per_param``
    (one host copy for all of them); returns their global post-clip norms."""
    flat = [t for s in steps for t in s.clipped]
    if flat and all(isinstance(t, torch.Tensor) for t in flat):
        with torch.no_grad():
            device = flat[0].device
            values = torch.stack([t.to(device, torch.float32) for t in flat]).to("cpu", torch.float64).numpy()
    else:
        values = np.array([float(t) for t in flat], dtype=np.float64)   # host floats (or none)
    totals = np.zeros(len(steps))
    start = 0
    for k, (s, r) in enumerate(zip(steps, rows)):
        part = values[start:start + len(s.clipped)]
        start += len(s.clipped)
        cols = np.arange(s.n) if s.present is None else np.asarray(s.present, dtype=np.intp)
        per_param[r, cols] = part
        totals[k] = np.sqrt(np.sum(part * part))
    return totals


def _host_block(values: list, squared: bool, length: int) -> tuple[np.ndarray, np.ndarray]:
    """(squared norms, norms) of rows of the same layout as float64 (R x length) arrays."""
    if squared:
        sq = np.array(values, dtype=np.float64).reshape(len(values), length)
        return sq, np.sqrt(sq)
    flat = [v for row in values for v in row]
    if flat:
        with torch.no_grad():
            block = torch.stack(flat).to("cpu", torch.float64).numpy().reshape(len(values), length)
    else:
        block = np.zeros((len(values), 0))
    return block * block, block
