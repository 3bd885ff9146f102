"""User ``autograd.Function`` calls, found without patching torch.

torch offers no public hook on ``Function.apply`` (a ``TorchFunctionMode`` does not see it, and
on torch 2.14 ``apply`` is a C ``classmethod_descriptor`` that cannot be wrapped the old way).
What a mode *does* see is every torch call made inside the Function's ``forward``: from such a
call, the Python stack holds the frame of ``forward``, whose arguments are the Function's
inputs. So a capture asks ``find_forward(frame)`` on each torch call; the frame's code object
is matched against the ``forward`` of every ``autograd.Function`` subclass defined outside
torch (found through ``__subclasses__``, a public mechanism). In the ``forward(ctx, ...)``
style ``ctx`` *is* the graph node of the call (``y.grad_fn is ctx`` on torch 2.13 and 2.14);
in the ``setup_context`` style the node is matched afterwards by its ``_forward_cls``.

A Function whose forward runs no torch call at all is not seen here; it still appears in the
graph (its node carries ``_forward_cls``) and ``unrecorded_functions`` names it.
"""
from __future__ import annotations

import inspect
import logging
import sys
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode

from gradviz.core.trace.capture import compiling

log = logging.getLogger(__name__)

MAX_CALLS_PER_FUNCTION = 2     # inputs kept per Function class: enough to check it, bounded memory


@dataclass
class CustomCall:
    cls: type
    name: str              # module.qualname, as the graph's ``custom`` attribute
    args: tuple
    kwargs: dict
    node: Any              # grad_fn of the output (None until matched)
    location: str
    code: str


def custom_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def is_user_function(cls: type | None) -> bool:
    """A Function written outside torch (torch's own, e.g. checkpointing's, are not checked)."""
    return cls is not None and not (cls.__module__ or "").startswith("torch.")


def _subclasses(root: type) -> Iterable[type]:
    todo = list(root.__subclasses__())
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        yield cls
        todo.extend(cls.__subclasses__())


class _ForwardCodes:
    """code object of ``forward`` -> its Function class, refreshed when an unknown one appears."""

    def __init__(self) -> None:
        self.known: dict[CodeType, type] = {}
        self.not_functions: set[CodeType] = set()

    def refresh(self) -> None:
        for cls in _subclasses(torch.autograd.Function):
            fwd = cls.__dict__.get("forward")
            fn = getattr(fwd, "__func__", fwd)
            code = getattr(fn, "__code__", None)
            if code is not None and is_user_function(cls):
                self.known[code] = cls

    def lookup(self, code: CodeType) -> type | None:
        cls = self.known.get(code)
        if cls is not None or code in self.not_functions:
            return cls
        self.refresh()
        cls = self.known.get(code)
        if cls is None:
            self.not_functions.add(code)
        return cls


_CODES = _ForwardCodes()


def find_forward(frame: FrameType | None, stop: FrameType | None = None) -> tuple[type, FrameType] | None:
    """The innermost user ``Function.forward`` frame on the stack from ``frame`` up to ``stop``."""
    while frame is not None and frame is not stop:
        code = frame.f_code
        if code.co_name == "forward":
            cls = _CODES.lookup(code)
            if cls is not None:
                return cls, frame
        frame = frame.f_back
    return None


def forward_arguments(frame: FrameType) -> tuple[Any, tuple, dict]:
    """``(ctx or None, args, kwargs)`` of a ``forward`` frame, read before its body reassigns them."""
    info = inspect.getargvalues(frame)
    values = [info.locals[n] for n in info.args]
    ctx = None
    if values and hasattr(values[0], "_forward_cls"):
        ctx, values = values[0], values[1:]
    if info.varargs:
        values += list(info.locals.get(info.varargs, ()))
    kwargs = dict(info.locals.get(info.keywords, {})) if info.keywords else {}
    return ctx, tuple(values), kwargs


def _clone_arg(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.detach().clone().requires_grad_(a.requires_grad and (a.is_floating_point() or a.is_complex()))
    return a


class CustomCallLog:
    """Collects ``CustomCall``s from the torch calls a mode sees (one record per forward frame)."""

    def __init__(self, stop: FrameType | None = None, per_function: int = MAX_CALLS_PER_FUNCTION) -> None:
        self.calls: list[CustomCall] = []
        self.stop = stop
        self.per_function = per_function
        self._frames: list[FrameType] = []     # forward frames already recorded (held until clear())

    def see(self, frame: FrameType | None, locate: Callable[[FrameType | None], tuple[str, str]] | None = None) -> None:
        """Record the Function call whose ``forward`` runs the torch call seen from ``frame``;
        ``locate(frame)`` gives ``(file:line, code)`` of the caller of ``apply``."""
        found = find_forward(frame, self.stop)
        if found is None:
            return
        cls, fwd = found
        if any(f is fwd for f in self._frames):
            return
        self._frames.append(fwd)
        if sum(1 for c in self.calls if c.cls is cls) >= self.per_function:
            return
        ctx, args, kwargs = forward_arguments(fwd)
        loc, code = locate(fwd.f_back) if locate is not None else ("", "")
        self.calls.append(CustomCall(cls, custom_name(cls), tuple(_clone_arg(a) for a in args),
                                     {k: _clone_arg(v) for k, v in kwargs.items()}, ctx, loc, code))

    def clear_frames(self) -> None:
        self._frames.clear()

    def match_nodes(self, nodes: Iterable[Any]) -> None:
        """Give calls recorded without ``ctx`` (``setup_context`` style) their graph node, by class."""
        free: dict[type, list[Any]] = {}
        taken = {id(c.node) for c in self.calls if c.node is not None}
        for fn in nodes:
            cls = getattr(fn, "_forward_cls", None)
            if cls is not None and id(fn) not in taken:
                free.setdefault(cls, []).append(fn)
        for c in self.calls:
            if c.node is None and free.get(c.cls):
                c.node = free[c.cls].pop(0)


def unrecorded_functions(nodes: Iterable[Any], calls: list[CustomCall]) -> list[str]:
    """User Functions present in the graph whose inputs no capture saw (no torch call in forward)."""
    have = {c.cls for c in calls}
    out: dict[str, None] = {}
    for fn in nodes:
        cls = getattr(fn, "_forward_cls", None)
        if is_user_function(cls) and cls not in have:
            out[custom_name(cls)] = None
    return list(out)


class CustomCallRecorder(TorchFunctionMode):
    """A mode that only records user Function calls (``gradcheck_script``'s float64 forward)."""

    def __init__(self, per_function: int = 1) -> None:
        super().__init__()
        self.log = CustomCallLog(per_function=per_function)

    def __enter__(self):
        self.log.stop = sys._getframe(1)
        return super().__enter__()

    def __exit__(self, *exc):
        self.log.clear_frames()
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not compiling():
            self.log.see(sys._getframe(1))
        return func(*args, **(kwargs or {}))

    @property
    def calls(self) -> list[CustomCall]:
        return self.log.calls
