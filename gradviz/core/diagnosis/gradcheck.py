"""Numerical gradient check of a script: central differences in float64 against autograd.

``gradcheck_script`` checks a script's parameters on a float64 deep copy of the model
(the user's model is never touched): for each parameter, all elements when it is
small, else ``samples`` of them (random, plus the element with the largest
gradient). Each element costs two forward passes ``(f(x+eps) - f(x-eps)) / 2eps``
(the arithmetic is in ``numeric.py``).

Every evaluation must compute the same function, so module state is frozen: dropout
modules are switched off, the RNG is re-seeded before every forward (functional dropout
draws the same mask) and every buffer is restored before every forward (spectral_norm's
power iteration, BatchNorm's running statistics and the like would otherwise change the
function between the two sides of a difference).

Precision: forwards of the float64 copy run with float64 as torch's default dtype, so what
the forward creates (``torch.zeros(...)`` in ``init_hidden``) is float64 too. A forward that
still mixes precisions (``torch.eye(n).float()`` is float32 by name) fails on the float64
copy: the check then runs in the model's own dtype, with tolerances derived from that dtype's
rounding, and says so (``report.check_dtype``, a note): never ``check-incomplete`` for a
healthy model. The first forward records the lowest floating precision that carries gradient
inside the computation (T5's layer norm upcasts to float32 even in a float64 copy); below
float64 the check loosens its tolerances and says so (``report.lowest_dtype``), and the
checklist treats a mismatch there as not conclusive. ``report.functions_on_path`` names
the user autograd.Functions in the loss's graph: only then can a hand-written backward be
to blame.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from gradviz.core.trace.capture import compiling
from gradviz.core.runtime.random_state import seeded
from gradviz.core.runtime.devices import model_device, to_device
from gradviz.core.diagnosis.customs import CustomCallRecorder, custom_name, is_user_function
from gradviz.core.diagnosis.numeric import (ATOL, EPS, RTOL, SAMPLES, Cancelled, ParamCheck, _element_indices,
                                            check_custom_call, check_elements)
from gradviz.core.diagnosis.sampled_grads import sampled_gradients
from gradviz.core.script.load import ModelScript, ScriptError, check_loss, load_script
from gradviz.core.trace.walk import walk

DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
# tolerances when something below float64 carries gradient inside the computation
LOW_PRECISION = {"eps": 1e-3, "atol": 1e-3, "rtol": 5e-2}


@dataclass
class GradcheckReport:
    params: list[ParamCheck] = field(default_factory=list)
    functions: list[ParamCheck] = field(default_factory=list)
    eps: float = EPS
    atol: float = ATOL
    rtol: float = RTOL
    dtype: str = "float64"            # the loss's dtype
    lowest_dtype: str = "float64"     # the lowest precision that carries gradient inside
    functions_on_path: list[str] = field(default_factory=list)
    check_dtype: str = "float64"      # the dtype the copy was checked in
    seconds: float = 0.0
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.passed for p in self.params) and all(f.passed for f in self.functions)

    @property
    def failed(self) -> list[ParamCheck]:
        return [p for p in self.params + self.functions if not p.passed]

    @property
    def conclusive(self) -> bool:
        return self.lowest_dtype == "float64"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "eps": self.eps, "atol": self.atol, "rtol": self.rtol, "dtype": self.dtype,
                "lowest_dtype": self.lowest_dtype, "check_dtype": self.check_dtype, "functions_on_path": list(self.functions_on_path),
                "seconds": self.seconds, "cancelled": self.cancelled, "notes": list(self.notes),
                "params": [p.to_dict() for p in self.params], "functions": [f.to_dict() for f in self.functions]}


# ---------------------------------------------------------------------------
# a script's parameters


class _Evaluator:
    """Forward + loss of a float64 copy, from the same state every time (RNG and buffers)."""

    def __init__(self, script: ModelScript, model: nn.Module, inputs: tuple, targets: Any, seed: int,
                 dtype: torch.dtype = torch.float64) -> None:
        self.script, self.model, self.inputs, self.targets, self.seed = script, model, inputs, targets, seed
        self.dtype = dtype           # torch's default dtype during each forward: what the forward creates
        self.no_grad_ok = True
        self.count = 0
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()]

    def loss(self) -> torch.Tensor:
        with seeded(self.seed):          # every evaluation draws the same numbers (dropout left on by the script)
            with torch.no_grad():
                for live, saved in self.buffers:
                    live.copy_(saved)
            self.count += 1
            before = torch.get_default_dtype()
            torch.set_default_dtype(self.dtype)
            try:
                return self.script.compute_loss(self.model, self.inputs, self.targets)
            finally:
                torch.set_default_dtype(before)

    def value(self) -> float:
        if self.no_grad_ok:
            try:
                with torch.no_grad():
                    return _scalar(self.loss())
            except ScriptError:
                self.no_grad_ok = False
        return _scalar(self.loss())


def _scalar(raw: Any) -> float:
    if isinstance(raw, torch.Tensor):
        return float(raw.detach().double().sum())
    return float(raw)


def _freeze_power_iteration(model: nn.Module) -> list[str]:
    """Spectral norm runs a power iteration in training mode whose vectors autograd treats as
    constants; in eval mode both forms (the parametrization and the older hook) use the stored
    vectors. Returns the modules switched."""
    from torch.nn.utils.spectral_norm import SpectralNorm
    switched = []
    for name, m in model.named_modules():
        hooked = any(isinstance(h, SpectralNorm) for h in m._forward_pre_hooks.values())
        if hooked or type(m).__name__ == "_SpectralNorm":
            m.eval()
            switched.append(name or type(m).__name__)
    return switched


def prepare_copy(script: ModelScript, model: nn.Module | None = None, *, seed: int = 0, step: int = 0,
                 dtype: torch.dtype = torch.float64) -> tuple[nn.Module, tuple, Any, list[str]]:
    """A deep copy of the model in ``dtype`` with dropout off, and the batch in ``dtype``."""
    if model is None:   # built here: converted in place, no second copy in memory
        with seeded(seed):
            copy_ = script.new_model()
    else:
        copy_ = copy.deepcopy(model)
    notes = []
    fixed = traced_dtypes(copy_)
    if fixed and dtype not in fixed:
        # an fx graph (a torch.export program's module) holds its dtypes as constants (``.to(float32)``,
        # dtype asserts): recast, it fails or computes in float32 anyway. Checked as it was traced, with the
        # low-precision tolerances (the first forward finds the lowest precision: _set_precision)
        dtype = min(fixed, key=lambda d: torch.finfo(d).bits)
        notes.append(f"the model is a traced graph (a torch.export program) whose operations fix their dtypes "
                     f"({', '.join(sorted(str(d).replace('torch.', '') for d in fixed))}): checked in "
                     f"{str(dtype).replace('torch.', '')}, not float64")
    copy_.to(dtype)
    dropped = [n or type(copy_).__name__ for n, m in copy_.named_modules() if isinstance(m, DROPOUT_TYPES)]
    for n, m in copy_.named_modules():
        if isinstance(m, DROPOUT_TYPES):
            m.eval()
    if dropped:
        notes.append(f"dropout disabled for the check ({', '.join(dropped[:5])}{'...' if len(dropped) > 5 else ''}); "
                     "BatchNorm and the rest keep their mode; the RNG is re-seeded before every forward")
    powered = _freeze_power_iteration(copy_)
    if powered:
        notes.append(f"spectral norm's power iteration frozen for the check ({', '.join(powered[:5])}): its "
                     "singular vectors are constants to autograd by design, so they must not move between evaluations")
    device = model_device(copy_)
    inputs, targets = script.get_batch(step)

    def cast(t):
        t = to_device(t, device)
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.to(dtype)
        if isinstance(t, (tuple, list)):
            return type(t)(cast(x) for x in t)
        return t

    return copy_, tuple(cast(t) for t in inputs), cast(targets), notes


def traced_dtypes(model: nn.Module) -> set[torch.dtype]:
    """The floating dtypes written into the operations of an fx graph module (empty for a Python model)."""
    graph = getattr(model, "graph", None) if isinstance(model, torch.fx.GraphModule) else None
    if graph is None:
        return set()
    found: set[torch.dtype] = set()

    def visit(value: Any) -> None:
        if isinstance(value, torch.dtype) and value.is_floating_point:
            found.add(value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
    for node in graph.nodes:
        visit(node.args)
        visit(node.kwargs)
    return found


class _FirstForward(CustomCallRecorder):
    """The first forward: user Function calls, and the lowest precision that carries gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.lowest: torch.dtype = torch.float64

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if compiling():
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point() \
                    and torch.finfo(t.dtype).eps > torch.finfo(self.lowest).eps:
                self.lowest = t.dtype
        return out


def _user_functions_on_path(loss: torch.Tensor) -> list[str]:
    nodes, _ = walk([loss.grad_fn])
    names = (custom_name(fn._forward_cls) for fn in nodes if is_user_function(getattr(fn, "_forward_cls", None)))
    return list(dict.fromkeys(names))


def _param_names(named: dict[str, torch.Tensor], params: Sequence[str] | None) -> list[str]:
    if params is None:
        return [n for n, p in named.items() if p.requires_grad]
    unknown = [n for n in params if n not in named]
    if unknown:
        raise ValueError(f"no such parameter(s): {', '.join(unknown)}")
    return list(params)


def rounding_atol(dtype: torch.dtype, loss_value: float, eps: float) -> float:
    """The absolute error a central difference carries from rounding alone: each of its two losses is
    off by about ``n * u * |L|`` (``u`` the dtype's unit roundoff; n = 64 covers a forward's accumulated
    roundings, Higham's bound for sums of that length), and the difference is divided by ``2 eps``."""
    return 64 * torch.finfo(dtype).eps * max(1.0, abs(loss_value)) / eps


def _set_precision(report: GradcheckReport, loss: torch.Tensor, lowest: torch.dtype) -> None:
    report.dtype = str(loss.dtype).replace("torch.", "")
    report.lowest_dtype = str(lowest).replace("torch.", "")
    if report.conclusive:
        return
    report.eps = max(report.eps, LOW_PRECISION["eps"])
    report.atol = max(report.atol, LOW_PRECISION["atol"],
                      rounding_atol(lowest, float(loss.detach().double().sum()), report.eps))
    report.rtol = max(report.rtol, LOW_PRECISION["rtol"])
    where = "the loss is" if report.dtype == report.lowest_dtype else "part of the computation is"
    report.notes.append(f"{where} computed in {report.lowest_dtype}, not float64 (even on the float64 copy): "
                        f"the check uses eps={report.eps:g} and looser tolerances (atol={report.atol:g}, "
                        f"rtol={report.rtol:g}), and a mismatch is not conclusive")


def gradcheck_script(source: Any, *, params: Sequence[str] | None = None, samples: int | None = SAMPLES,
                     eps: float = EPS, atol: float = ATOL, rtol: float = RTOL, seed: int = 0, step: int = 0,
                     model: nn.Module | None = None, functions: bool = True,
                     progress: Callable[[int, int, str], None] | None = None, cancel: Any = None,
                     budget_s: float | None = None) -> GradcheckReport:
    """Numerically check the gradients of a script's parameters (and of its user autograd.Functions).

    ``source``: a script path or a loaded ``ModelScript``. ``params``: qualified names
    (default: every trainable parameter). ``samples``: elements per parameter (None: all).
    ``model``: check this model instead of a fresh one (it is deep-copied, never
    modified). ``progress(done, total, name)`` after each element; ``cancel`` (an Event
    or a callable) stops between two elements, returning a partial report with
    ``cancelled=True``. ``budget_s`` spreads about that many seconds over the parameters.
    Raises ScriptError when the script cannot run.
    """
    start = time.perf_counter()
    script = source if isinstance(source, ModelScript) else load_script(source)
    report = GradcheckReport(eps=eps, atol=atol, rtol=rtol)
    m64, inputs, targets, notes = prepare_copy(script, model, seed=seed, step=step)
    ev = _Evaluator(script, m64, inputs, targets, seed)
    first = _FirstForward()
    t0 = time.perf_counter()
    try:
        with first:
            raw = ev.loss()
    except ScriptError as exc:
        own = _own_dtype(script, model, seed)
        if own is None or exc.code != "forward-error":
            raise
        # the forward mixes precisions on a float64 copy (it creates tensors of a dtype by name): check the
        # model in its own dtype, as it runs
        m64, inputs, targets, notes = prepare_copy(script, model, seed=seed, step=step, dtype=own)
        ev = _Evaluator(script, m64, inputs, targets, seed, dtype=torch.get_default_dtype())
        report.check_dtype = str(own).replace("torch.", "")
        report.notes.append(f"the forward fails on a float64 copy ({str(exc).splitlines()[0][:160]}): it creates "
                            f"tensors of its own dtype, so the check ran in {report.check_dtype}, the dtype the model "
                            "runs in, with tolerances from its rounding")
        first = _FirstForward()
        t0 = time.perf_counter()
        with first:
            raw = ev.loss()
    report.notes += notes
    named = dict(m64.named_parameters())
    names = _param_names(named, params)
    loss = check_loss(raw, *script.loss_site())
    t_forward = max(time.perf_counter() - t0, 1e-4)
    _set_precision(report, loss, first.lowest)
    report.functions_on_path = _user_functions_on_path(loss)
    tensors = [named[n] for n in names]
    if budget_s is not None and names:
        per_param = budget_s / (2.2 * t_forward * len(names))
        samples = int(max(2, min(samples or 64, per_param)))
        report.notes.append(f"{samples} sampled elements per parameter (time budget {budget_s:g} s)")
    # one backward keeping only the sampled elements of each gradient (core/diagnosis/sampled_grads.py: the
    # float64 gradients of a big model would cost twice its size); a generator per parameter, so
    # the picks do not depend on the order backward reaches the parameters in
    picks = sampled_gradients(loss, tensors, lambda k, g: _element_indices(
        tensors[k].numel(), samples, g, torch.Generator().manual_seed(seed * 1_000_003 + k))) if tensors else []
    plan = [(n, t, g, list(g)) for n, t, g in zip(names, tensors, picks)]
    try:
        _run_plan(plan, ev, report, budget_s, progress, cancel)
        if functions:
            for call in first.calls:
                report.functions += check_custom_call(call, samples=None if budget_s is None else 16, cancel=cancel)
    except Cancelled:
        report.cancelled = True
    refined = sum(p.refined for p in report.params)
    if refined:
        report.notes.append(f"{refined} element(s) agreed with autograd only at a smaller step than eps={report.eps:g} "
                            "(the loss bends sharply, or has kinks closer together than eps, along those elements)")
    report.seconds = time.perf_counter() - start
    return report


def _own_dtype(script: ModelScript, model: nn.Module | None, seed: int) -> torch.dtype | None:
    """The floating dtype the model's parameters are in, when it is not float64 (else None)."""
    if model is None:
        with seeded(seed):
            model = script.new_model()
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.get_default_dtype())
    return None if dtype == torch.float64 else dtype


def _run_plan(plan: list, ev: _Evaluator, report: GradcheckReport, budget_s: float | None,
              progress: Callable[[int, int, str], None] | None, cancel: Any) -> None:
    """Check the planned elements round-robin, so a time limit leaves every parameter checked alike."""
    total = sum(len(p[3]) for p in plan)
    done = [0]
    current = [""]

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], total, current[0])

    deadline = time.perf_counter() + 1.5 * budget_s if budget_s is not None else None
    # a failing element is differenced again at 10x, 100x and 1000x smaller steps (numeric.py): only
    # in float64, where rounding leaves room for them (MobileNetV2's stem needs 1e-8: dense ReLU6 kinks)
    refine = tuple(report.eps / k for k in (10, 100, 1000)) if report.conclusive else ()
    results = {}
    for n, t, g, idx in plan:
        results[n] = ParamCheck(n, t.numel(), list(t.shape))
        report.params.append(results[n])
    for r in range(max((len(p[3]) for p in plan), default=0)):
        for n, t, g, idx in plan:
            if r >= len(idx):
                continue
            if deadline is not None and time.perf_counter() > deadline:
                report.notes.append(f"stopped at the time budget after {done[0]} of {total} elements")
                return
            current[0] = n
            check_elements(ev.value, t, g, [idx[r]], results[n], report.eps, report.atol, report.rtol, cancel, tick,
                           refine=refine)
