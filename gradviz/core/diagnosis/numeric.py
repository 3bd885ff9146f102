"""Central differences against autograd, element by element: the arithmetic of every check.

An element passes like ``torch.autograd.gradcheck``'s test:
``|analytic - numeric| <= atol + rtol * |numeric|``. An element that fails is first
differenced again with smaller steps (``refine``, float64 only): central differences carry a
truncation error of order ``eps**2 * f'''``, which a strongly curved but smooth function
turns into a false mismatch: MobileNetV2's stem (conv weights of std 0.02 before a
training-mode BatchNorm, then ReLU6 kinks densely spaced along any direction) is 2-3% off at
eps=1e-6 and agrees to 1e-3 at 1e-8 and to 7 digits at 1e-9.
A wrong backward does not pass that way: the differences converge to the true derivative,
not to the wrong one, however small the step; and a step is used only while its rounding
error stays well under the tolerance, so a pass there is not noise. An element that still
fails is checked for a kink (ReLU at 0, max ties): when the one-sided differences disagree
as much as the error, the point is not differentiable and the element is skipped, not failed.

``gradcheck_function`` checks one function (e.g. a user ``autograd.Function``) on given
inputs: the full Jacobian when small, random output projections otherwise;
``check_custom_call`` does it for a recorded call, in float64 when the Function allows.
"""
from __future__ import annotations

import inspect
import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten

from gradviz.core.diagnosis.customs import CustomCall

log = logging.getLogger(__name__)

EPS = 1e-6
ATOL = 1e-5
RTOL = 1e-3
SAMPLES = 16


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
    refined: int = 0          # elements that agreed only with a smaller step (strong curvature)
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
                   on_element: Callable[[], None] | None = None, refine: Sequence[float] = ()) -> None:
    """Perturb ``tensor`` (a leaf, in place, restored) at ``indices`` and compare ``f``'s central
    differences with ``analytic``; an element that fails is differenced again with each step of
    ``refine`` (smaller than ``eps``) before it counts as failed. Raises Cancelled between elements."""
    # a dict {flat index: value} when only the sampled elements were kept (core/diagnosis/sampled_grads.py)
    flat_a = analytic if isinstance(analytic, dict) else analytic.detach().reshape(-1)
    with torch.no_grad():
        view = tensor.data.view(-1) if tensor.is_contiguous() else None
        for i in indices:
            if _is_cancelled(cancel):
                raise Cancelled()
            target = view if view is not None else tensor.data.reshape(-1)
            orig = target[i].item()
            fp, fm = _central(f, tensor, view, i, orig, eps)
            num = (fp - fm) / (2 * eps)
            a = float(flat_a[i])
            err = abs(a - num)
            if err > atol + rtol * abs(num) and math.isfinite(num):
                smaller = _refined(f, tensor, view, i, orig, a, refine, atol, rtol, max(abs(fp), abs(fm)))
                if smaller is not None:
                    num = smaller
                    result.refined += 1
                elif _is_kink(f, fp, fm, eps, err, atol):
                    result.skipped += 1
                    if on_element:
                        on_element()
                    continue
            result.add(i, a, num, atol, rtol)
            if on_element:
                on_element()


def _central(f: Callable[[], float], tensor: torch.Tensor, view: torch.Tensor | None, i: int, orig: float,
             eps: float) -> tuple[float, float]:
    """``f`` with element ``i`` at ``orig + eps`` and at ``orig - eps`` (restored after)."""
    try:
        _set(tensor, view, i, orig + eps)
        fp = f()
        _set(tensor, view, i, orig - eps)
        fm = f()
    finally:
        _set(tensor, view, i, orig)
    return fp, fm


# the rounding error of a whole forward pass, taken generously as this many units in the last
# place of f: a smaller step is tried only where rounding cannot fake an agreement
ROUNDING_ULPS = 1e3


def _refined(f: Callable[[], float], tensor: torch.Tensor, view: torch.Tensor | None, i: int, orig: float,
             analytic: float, steps: Sequence[float], atol: float, rtol: float, scale: float) -> float | None:
    """The central difference at the first smaller step that agrees with ``analytic``, else None.
    A step whose rounding error (``ROUNDING_ULPS * eps_machine * |f| / step``) is over a tenth
    of the tolerance is not tried."""
    unit = torch.finfo(tensor.dtype).eps
    for step in steps:
        if ROUNDING_ULPS * unit * max(scale, 1.0) / step > 0.1 * (atol + rtol * abs(analytic)):
            break
        fp, fm = _central(f, tensor, view, i, orig, step)
        num = (fp - fm) / (2 * step)
        if math.isfinite(num) and abs(analytic - num) <= atol + rtol * abs(num):
            return num
    return None


def _is_kink(f: Callable[[], float], fp: float, fm: float, eps: float, err: float, atol: float) -> bool:
    """The one-sided slopes disagree about as much as the error: not differentiable there."""
    f0 = f()
    right, left = (fp - f0) / eps, (f0 - fm) / eps
    return abs(right - left) > max(0.5 * err, atol)


def _set(tensor: torch.Tensor, view: torch.Tensor | None, i: int, value: float) -> None:
    if view is not None:
        view[i] = value
    else:
        idx = torch.unravel_index(torch.tensor(i), tensor.shape)
        tensor.data[tuple(int(j) for j in idx)] = value


# ---------------------------------------------------------------------------
# a function on inputs


def _float_outputs(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]


def gradcheck_function(fn: Callable, inputs: Sequence[Any], *, kwargs: dict | None = None, eps: float = EPS,
                       atol: float = ATOL, rtol: float = RTOL, samples: int | None = None, seed: int = 0,
                       name: str | None = None, cancel: Any = None) -> list[ParamCheck]:
    """Check ``fn(*inputs)``'s backward against central differences, per input that requires grad.

    With the full Jacobian (every output element against every input element) when it is
    small, as ``torch.autograd.gradcheck`` does; otherwise through random projections of
    the output (``samples`` input elements each). Inputs are used as given (pass float64).
    """
    # over 60 lines: the two ways of checking an input (full Jacobian / random projections) share setup
    # and the per-input result; kept side by side so they stay the same test
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
        except Exception:  # noqa: BLE001 - e.g. a Function that only runs in float32: try its own dtype
            log.debug("checking %s in %s failed; trying its own dtype", call.name, dtype, exc_info=True)
            continue
        for r in res:
            r.location = backward_site(call.cls) or call.location or None
        return res
    return []


def backward_site(cls: type) -> str | None:
    """file:line where a Function's ``backward`` is defined."""
    try:
        fn = cls.backward
        lines, start = inspect.getsourcelines(fn)
        return f"{inspect.getsourcefile(fn)}:{start}"
    except (TypeError, OSError):
        return None
