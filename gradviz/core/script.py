"""Load a user's model script and call into it with errors that name file:line.

A model script is a plain Python file run as its own module (its folder on
``sys.path``) that defines ``model``, ``batch`` and ``loss_fn`` (and optionally
``optimizer``, ``compute_loss`` and ``metrics``); see the README for the contract.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import torch
from torch import nn

from gradviz.core.errors import GradvizError

REQUIRED = ("model", "batch", "loss_fn")

_TORCH_DIR = os.path.dirname(torch.__file__)
_GRADVIZ_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ScriptError(GradvizError):
    """The user's script cannot be used. ``location`` is ``file:line`` when known.

    ``code`` says what went wrong: ``script-error`` (cannot load / breaks the
    contract), ``forward-error``, ``backward-error``, ``loss-not-tensor`` or
    ``loss-not-scalar``. ``details`` holds the formatted traceback, if any.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 code: str = "script-error", details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.code = code
        self.details = details

    @property
    def location(self) -> str | None:
        if self.path is None:
            return None
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message


def is_user_file(filename: str) -> bool:
    """True for code the user wrote: not torch, not gradviz, not the standard library."""
    if not filename or filename.startswith("<"):
        return False
    filename = os.path.abspath(filename)
    if filename.startswith((_TORCH_DIR, _GRADVIZ_DIR)):
        return False
    return "site-packages" not in filename and not filename.startswith(_STDLIB_DIR)


_STDLIB_DIR = os.path.dirname(os.__file__)


def user_frame_of(tb: TracebackType | None) -> tuple[str, int] | None:
    """The innermost traceback frame that lies in user code."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        if is_user_file(frame.f_code.co_filename):
            found = (frame.f_code.co_filename, lineno)
    return found


def error_from_exception(exc: BaseException, what: str, code: str,
                         fallback: tuple[str, int] | None = None) -> ScriptError:
    """Wrap an exception raised by user code, pointing at the user's line."""
    if isinstance(exc, ScriptError):
        return exc
    where = None
    if isinstance(exc, SyntaxError) and exc.filename:
        where = (exc.filename, exc.lineno or 0)
    where = where or user_frame_of(exc.__traceback__) or fallback
    details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = f"{what}: {type(exc).__name__}: {exc}"
    path, line = where if where else (None, None)
    return ScriptError(message, path=path, line=line, code=code, details=details)


def definition_site(obj: Any) -> tuple[str, int] | None:
    """file:line where a user's function or class was defined."""
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__call__", None), "__code__", None)
    if code is not None:
        return code.co_filename, code.co_firstlineno
    return None


@dataclass
class ModelScript:
    """A loaded model script: the functions it defines, wrapped to fail clearly."""

    path: Path
    module: ModuleType

    # -- contract -----------------------------------------------------------
    @property
    def has_compute_loss(self) -> bool:
        return callable(getattr(self.module, "compute_loss", None))

    def attr(self, name: str) -> Any:
        return getattr(self.module, name, None)

    def new_model(self) -> nn.Module:
        """A fresh model: calls ``model()`` or deep-copies a module instance."""
        spec = self.module.model
        if isinstance(spec, nn.Module):
            # a module object cannot be re-created; copy so callers never share state
            return copy.deepcopy(spec)
        try:
            model = spec()
        except Exception as exc:
            raise error_from_exception(exc, "model() raised", "script-error", definition_site(spec))
        if not isinstance(model, nn.Module):
            raise ScriptError(f"model() must return a torch.nn.Module, got {type(model).__name__}",
                              **self._site(spec))
        return model

    def get_batch(self, step: int = 0) -> tuple[tuple[Any, ...], Any]:
        """``batch(step)`` checked to be ``(inputs, targets)``; inputs as a tuple."""
        fn = self.module.batch
        try:
            result = fn(step)
        except Exception as exc:
            raise error_from_exception(exc, f"batch({step}) raised", "script-error", definition_site(fn))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            got = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
            raise ScriptError(f"batch({step}) must return (inputs, targets), got {got}", **self._site(fn))
        inputs, targets = result
        if isinstance(inputs, torch.Tensor):
            inputs = (inputs,)
        elif isinstance(inputs, (tuple, list)) and inputs and all(isinstance(t, torch.Tensor) for t in inputs):
            inputs = tuple(inputs)
        else:
            raise ScriptError(f"batch({step}) must return inputs as a tensor or a tuple of tensors, "
                              f"got {type(inputs).__name__}", **self._site(fn))
        return inputs, targets

    def compute_loss(self, model: nn.Module, inputs: tuple[Any, ...], targets: Any) -> Any:
        """Forward and loss, through ``compute_loss`` or ``loss_fn(model(*inputs), targets)``.

        Returns whatever the script returns; callers check it with ``check_loss``.
        """
        custom = self.attr("compute_loss")
        if callable(custom):
            try:
                return custom(model, inputs, targets)
            except Exception as exc:
                raise error_from_exception(exc, "compute_loss raised", "forward-error", definition_site(custom))
        try:
            output = model(*inputs)
        except Exception as exc:
            raise error_from_exception(exc, "the model's forward raised", "forward-error",
                                       definition_site(type(model).forward))
        fn = self.module.loss_fn
        try:
            return fn(output, targets)
        except Exception as exc:
            raise error_from_exception(exc, "loss_fn raised", "forward-error", definition_site(fn))

    def loss_site(self) -> tuple[str | None, int | None]:
        fn = self.attr("compute_loss") if self.has_compute_loss else self.attr("loss_fn")
        return self._where(fn)

    def _site(self, obj: Any) -> dict:
        path, line = self._where(obj)
        return {"path": path, "line": line}

    def check_loss(self, loss: Any) -> torch.Tensor:
        """The loss as a scalar tensor with a graph, or a ScriptError saying why not."""
        path, line = self.loss_site()
        return check_loss(loss, path, line)

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        fn = self.attr("optimizer")
        if fn is None:
            return torch.optim.SGD(params, lr=0.01)
        try:
            return fn(params)
        except Exception as exc:
            raise error_from_exception(exc, "optimizer() raised", "script-error", definition_site(fn))

    def _where(self, obj: Any) -> tuple[str | None, int | None]:
        site = definition_site(obj) if obj is not None else None
        return site if site else (str(self.path), None)


def check_loss(loss: Any, path: str | None = None, line: int | None = None) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise ScriptError(
            f"the loss is a {type(loss).__name__} ({loss!r:.40}), not a tensor: the autograd graph is gone "
            "(was .item() or float() called on it?). Return the loss tensor itself.",
            path=path, line=line, code="loss-not-tensor")
    if loss.numel() != 1:
        raise ScriptError(
            f"the loss has {loss.numel()} elements (shape {tuple(loss.shape)}); backward() needs a scalar. "
            "Reduce it with .mean() or .sum() (or use reduction='mean').",
            path=path, line=line, code="loss-not-scalar")
    if loss.grad_fn is None:
        raise ScriptError(
            "the loss does not require grad: no parameter reaches it (was the whole forward under "
            "torch.no_grad(), or every path detached?)", path=path, line=line, code="loss-not-tensor")
    return loss


def load_script(path: str | os.PathLike) -> ModelScript:
    """Run a model script as its own module and check it defines the contract's names."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ScriptError(f"no such script: {path}", path=str(path))
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the script may import helpers that sit beside it
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"gradviz_script_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ScriptError("not a Python file", path=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit in a script is also a failed import
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise error_from_exception(exc, "the script failed to import", "script-error", (str(path), 1)) from None
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ScriptError(
            f"the script does not define {', '.join(repr(m) for m in missing)}; a model script needs "
            "`model` (an nn.Module or a function returning one), `batch(step) -> (inputs, targets)` "
            "and `loss_fn(output, targets)`", path=str(path), line=1)
    for n in REQUIRED[1:]:
        if not callable(getattr(module, n)):
            raise ScriptError(f"`{n}` must be a function", path=str(path), line=1)
    if not (isinstance(module.model, nn.Module) or callable(module.model)):
        raise ScriptError("`model` must be an nn.Module or a function returning one", path=str(path), line=1)
    return ModelScript(path=path, module=module)
