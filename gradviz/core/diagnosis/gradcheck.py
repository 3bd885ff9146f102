"""Numerical gradient check: central differences in float64 against autograd.

``gradcheck_script`` checks a script's parameters on a float64 deep copy of the model
(the user's model is never touched): for each parameter, all elements when it is
small, else ``samples`` of them (random, plus the element with the largest
gradient). Each element costs two forward passes ``(f(x+eps) - f(x-eps)) / 2eps``.
An element passes like ``torch.autograd.gradcheck``'s test:
``|analytic - numeric| <= atol + rtol * |numeric|``. An element that fails is checked
for a kink (ReLU at 0, max ties): when the one-sided differences disagree as much
as the error, the point is not differentiable and the element is skipped, not failed.

Randomness: dropout modules are switched off for the check (BatchNorm stays in
training mode) and the RNG is re-seeded before every evaluation, so each forward
sees the same random numbers.

``gradcheck_function`` checks one function (e.g. a user ``autograd.Function``) on given
inputs: the full Jacobian when small, random output projections otherwise.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from gradviz.core.devices import model_device, to_device
from gradviz.core.diagnosis.customs import CustomCall, CustomCallRecorder
from gradviz.core.script import ModelScript, ScriptError, check_loss, load_script

EPS = 1e-6
ATOL = 1e-5
RTOL = 1e-3
SAMPLES = 16
DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


class Cancelled(Exception):
    pass


@dataclass
class ParamCheck:
    """The result for one parameter (``kind='param'``) or one function input (``kind='function'``)."""

    name: str
    numel: int
    shape: list[int] = field(default_factory=list)
    checked: int = 0
    skipped: int = 0          # non-differentiable points (kinks)
    failed: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: dict | None = None    # {index, analytic, numeric}
    kind: str = "param"
    function: str | None = None  # qualified name of the autograd.Function
    location: str | None = None

    @property
    def passed(self) -> bool:
        return self.failed == 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d

    def add(self, index: int, a: float, n: float, atol: float, rtol: float) -> bool:
        err = abs(a - n)
        rel = err / max(abs(a), abs(n), atol)
        ok = err <= atol + rtol * abs(n)
        self.checked += 1
        if not ok:
            self.failed += 1
        if err > self.max_abs or self.worst is None:
            self.worst = {"index": index, "analytic": a, "numeric": n}
        self.max_abs = max(self.max_abs, err)
        self.max_rel = max(self.max_rel, rel)
        return ok


@dataclass
class GradcheckReport:
    params: list[ParamCheck] = field(default_factory=list)
    functions: list[ParamCheck] = field(default_factory=list)
    eps: float = EPS
    atol: float = ATOL
    rtol: float = RTOL
    dtype: str = "float64"
    seconds: float = 0.0
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.passed for p in self.params) and all(f.passed for f in self.functions)

    @property
    def failed(self) -> list[ParamCheck]:
        return [p for p in self.params + self.functions if not p.passed]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "eps": self.eps, "atol": self.atol, "rtol": self.rtol, "dtype": self.dtype,
                "seconds": self.seconds, "cancelled": self.cancelled, "notes": list(self.notes),
                "params": [p.to_dict() for p in self.params], "functions": [f.to_dict() for f in self.functions]}


def _is_cancelled(cancel: Any) -> bool:
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


def _element_indices(n: int, samples: int | None, grad: torch.Tensor | None, gen: torch.Generator) -> list[int]:
    if samples is None or n <= samples:
        return list(range(n))
    picks = torch.randperm(n, generator=gen)[: max(samples - 1, 1)].tolist()
    if grad is not None and samples > 1:
        top = int(grad.detach().abs().reshape(-1).argmax())
        if top not in picks:
            picks = [top] + picks
        else:
            picks = [top] + [i for i in picks if i != top] + [int(torch.randint(n, (1,), generator=gen))]
    return list(dict.fromkeys(picks))[:samples]


def check_elements(f: Callable[[], float], tensor: torch.Tensor, analytic: torch.Tensor, indices: Sequence[int],
                   result: ParamCheck, eps: float, atol: float, rtol: float, cancel: Any = None,
                   on_element: Callable[[], None] | None = None) -> None:
    """Perturb ``tensor`` (a leaf, in place, restored) at ``indices`` and compare ``f``'s central
    differences with ``analytic``; raises Cancelled between elements when asked."""
    flat_a = analytic.detach().reshape(-1)
    with torch.no_grad():
        view = tensor.data.view(-1) if tensor.is_contiguous() else None
        for i in indices:
            if _is_cancelled(cancel):
                raise Cancelled()
            target = view if view is not None else tensor.data.reshape(-1)
            orig = target[i].item()
            try:
                _set(tensor, view, i, orig + eps)
                fp = f()
                _set(tensor, view, i, orig - eps)
                fm = f()
            finally:
                _set(tensor, view, i, orig)
            num = (fp - fm) / (2 * eps)
            a = float(flat_a[i])
            err = abs(a - num)
            if err > atol + rtol * abs(num) and math.isfinite(num):
                f0 = f()   # a kink? the one-sided slopes disagree about as much as the error
                right, left = (fp - f0) / eps, (f0 - fm) / eps
                if abs(right - left) > max(0.5 * err, atol):
                    result.skipped += 1
                    if on_element:
                        on_element()
                    continue
            result.add(i, a, num, atol, rtol)
            if on_element:
                on_element()


def _set(tensor: torch.Tensor, view: torch.Tensor | None, i: int, value: float) -> None:
    if view is not None:
        view[i] = value
    else:
        idx = torch.unravel_index(torch.tensor(i), tensor.shape)
        tensor.data[tuple(int(j) for j in idx)] = value


# ---------------------------------------------------------------------------
# a function on inputs


def _float_outputs(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]


def gradcheck_function(fn: Callable, inputs: Sequence[Any], *, kwargs: dict | None = None, eps: float = EPS,
                       atol: float = ATOL, rtol: float = RTOL, samples: int | None = None, seed: int = 0,
                       name: str | None = None, cancel: Any = None) -> list[ParamCheck]:
    """Check ``fn(*inputs)``'s backward against central differences, per input that requires grad.

    With the full Jacobian (every output element against every input element) when it is
    small, as ``torch.autograd.gradcheck`` does; otherwise through random projections of
    the output (``samples`` input elements each). Inputs are used as given (pass float64).
    """
    kwargs = kwargs or {}
    inputs = list(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    label = name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "function")
    gen = torch.Generator().manual_seed(seed)

    def run(xs):
        return fn(*xs, **kwargs)

    with torch.enable_grad():
        outs = _float_outputs(run(inputs))
    results = []
    if not outs:
        return results
    n_out = sum(o.numel() for o in outs)
    for i in diff:
        x = inputs[i]
        short = label.rsplit(".", 1)[-1] if name else label
        res = ParamCheck(f"{short} (autograd.Function) input {i}", x.numel(), list(x.shape), kind="function",
                         function=label)
        small = x.numel() <= 512 and n_out <= 512 and samples is None
        if small:
            with torch.enable_grad():
                outs = _float_outputs(run(inputs))
                flat = torch.cat([o.reshape(-1) for o in outs])
                rows = []
                for k in range(flat.numel()):
                    g, = torch.autograd.grad(flat[k], x, retain_graph=True, allow_unused=True)
                    rows.append(torch.zeros_like(x).reshape(-1) if g is None else g.reshape(-1))
                jac_a = torch.stack(rows)          # (out, in)
            with torch.no_grad():
                view = x.data.view(-1)
                for j in range(x.numel()):
                    if _is_cancelled(cancel):
                        raise Cancelled()
                    orig = view[j].item()
                    view[j] = orig + eps
                    fp = torch.cat([o.reshape(-1) for o in _float_outputs(run(inputs))]).clone()
                    view[j] = orig - eps
                    fm = torch.cat([o.reshape(-1) for o in _float_outputs(run(inputs))]).clone()
                    view[j] = orig
                    col = (fp - fm) / (2 * eps)
                    for k in range(col.numel()):
                        res.add(k * x.numel() + j, float(jac_a[k, j]), float(col[k]), atol, rtol)
        else:
            us = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in outs]

            def scalar():
                return float(sum((u * o).sum() for u, o in zip(us, _float_outputs(run(inputs)))))

            with torch.enable_grad():
                o2 = _float_outputs(run(inputs))
                s = sum((u * o).sum() for u, o in zip(us, o2))
                g, = torch.autograd.grad(s, x, allow_unused=True)
            g = torch.zeros_like(x) if g is None else g
            idx = _element_indices(x.numel(), samples or SAMPLES, g, gen)
            check_elements(scalar, x, g, idx, res, eps, atol, rtol, cancel)
        results.append(res)
    return results


def check_custom_call(call: CustomCall, *, eps: float = EPS, atol: float = ATOL, rtol: float = RTOL,
                      samples: int | None = None, cancel: Any = None) -> list[ParamCheck]:
    """Check a recorded user ``autograd.Function`` call on its own inputs, in float64 when it allows."""
    def cast(a, dtype):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.detach().to(dtype).requires_grad_(a.requires_grad)
        return a

    for dtype, e, at, rt in ((torch.float64, eps, atol, rtol), (None, 1e-3, 1e-2, 5e-2)):
        args = [cast(a, dtype) if dtype is not None else cast(a, a.dtype) if isinstance(a, torch.Tensor) else a
                for a in call.args]
        kw = {k: cast(v, dtype) if dtype is not None else v for k, v in call.kwargs.items()}
        try:
            res = gradcheck_function(call.cls.apply, args, kwargs=kw, eps=e, atol=at, rtol=rt, samples=samples,
                                     name=call.name, cancel=cancel)
        except Cancelled:
            raise
        except Exception:
            continue
        for r in res:
            r.location = _backward_site(call.cls) or call.location or None
        return res
    return []


def _backward_site(cls: type) -> str | None:
    import inspect
    try:
        fn = cls.backward
        lines, start = inspect.getsourcelines(fn)
        return f"{inspect.getsourcefile(fn)}:{start}"
    except (TypeError, OSError):
        return None


# ---------------------------------------------------------------------------
# a script's parameters


class _Evaluator:
    """Forward + loss of a float64 copy, re-seeded every time."""

    def __init__(self, script: ModelScript, model: nn.Module, inputs: tuple, targets: Any, seed: int) -> None:
        self.script, self.model, self.inputs, self.targets, self.seed = script, model, inputs, targets, seed
        self.no_grad_ok = True
        self.count = 0

    def loss(self) -> torch.Tensor:
        torch.manual_seed(self.seed)
        self.count += 1
        return self.script.compute_loss(self.model, self.inputs, self.targets)

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


def prepare_copy(script: ModelScript, model: nn.Module | None = None, *, seed: int = 0, step: int = 0,
                 dtype: torch.dtype = torch.float64) -> tuple[nn.Module, tuple, Any, list[str]]:
    """A deep copy of the model in ``dtype`` with dropout off, and the batch in ``dtype``."""
    if model is None:
        torch.manual_seed(seed)
        model = script.new_model()
    copy_ = copy.deepcopy(model)
    copy_.to(dtype)
    notes = []
    dropped = [n or type(copy_).__name__ for n, m in copy_.named_modules() if isinstance(m, DROPOUT_TYPES)]
    for n, m in copy_.named_modules():
        if isinstance(m, DROPOUT_TYPES):
            m.eval()
    if dropped:
        notes.append(f"dropout disabled for the check ({', '.join(dropped[:5])}{'...' if len(dropped) > 5 else ''}); "
                     "BatchNorm and the rest keep their mode; the RNG is re-seeded before every forward")
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
    report.notes += notes
    ev = _Evaluator(script, m64, inputs, targets, seed)
    named = dict(m64.named_parameters())
    if params is None:
        names = [n for n, p in named.items() if p.requires_grad]
    else:
        unknown = [n for n in params if n not in named]
        if unknown:
            raise ValueError(f"no such parameter(s): {', '.join(unknown)}")
        names = list(params)
    recorder = CustomCallRecorder()
    t0 = time.perf_counter()
    with recorder:
        raw = ev.loss()
    customs: list[CustomCall] = recorder.calls if functions else []
    loss = check_loss(raw, *script.loss_site())
    t_forward = max(time.perf_counter() - t0, 1e-4)
    if loss.dtype != torch.float64:
        report.dtype = str(loss.dtype).replace("torch.", "")
        report.eps, report.atol, report.rtol = eps, atol, rtol = max(eps, 1e-3), max(atol, 1e-3), max(rtol, 5e-2)
        report.notes.append(f"the loss is computed in {report.dtype}, not float64: the check uses eps={eps:g} "
                            f"and looser tolerances (atol={atol:g}, rtol={rtol:g})")
    tensors = [named[n] for n in names]
    grads = torch.autograd.grad(loss, tensors, allow_unused=True) if tensors else ()
    # element-wise comparison: a sparse gradient (an embedding's) as the dense tensor it stands for
    grads = [torch.zeros_like(t) if g is None else (g if g.layout == torch.strided else g.to_dense())
             for t, g in zip(tensors, grads)]
    if budget_s is not None and names:
        per_param = budget_s / (2.2 * t_forward * len(names))
        samples = int(max(2, min(samples or 64, per_param)))
        report.notes.append(f"{samples} sampled elements per parameter (time budget {budget_s:g} s)")
    gen = torch.Generator().manual_seed(seed)
    plan = [(n, t, g, _element_indices(t.numel(), samples, g, gen)) for n, t, g in zip(names, tensors, grads)]
    total = sum(len(p[3]) for p in plan)
    done = [0]
    current = [""]

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], total, current[0])

    deadline = time.perf_counter() + 1.5 * budget_s if budget_s is not None else None
    results = {}
    for n, t, g, idx in plan:
        results[n] = ParamCheck(n, t.numel(), list(t.shape))
        report.params.append(results[n])
    try:
        rounds = max((len(p[3]) for p in plan), default=0)
        stopped = False
        for r in range(rounds):   # round-robin: a time limit leaves every parameter checked alike
            for n, t, g, idx in plan:
                if r >= len(idx):
                    continue
                if deadline is not None and time.perf_counter() > deadline:
                    stopped = True
                    break
                current[0] = n
                check_elements(ev.value, t, g, [idx[r]], results[n], eps, atol, rtol, cancel, tick)
            if stopped:
                report.notes.append(f"stopped at the time budget after {done[0]} of {total} elements")
                break
        if functions:
            for call in customs:
                report.functions += check_custom_call(call, samples=None if budget_s is None else 16, cancel=cancel)
    except Cancelled:
        report.cancelled = True
    report.seconds = time.perf_counter() - start
    return report
