"""Load a user's model script and call into it with errors that name file:line.

A model script is a plain Python file run as its own module (its folder on
``sys.path``) that defines ``model``, ``batch`` and ``loss_fn`` (and optionally
``optimizer``, ``compute_loss`` and ``metrics``); see the README for the contract.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from gradviz.core.runtime.errors import GradvizError, ScriptError  # noqa: F401 - ScriptError re-exported
from gradviz.core.runtime.gc_pause import started as gc_started
from gradviz.core.runtime.interrupts import Stopped, describe_exception, script_starting
from gradviz.core.runtime.locations import is_user_file, user_frame_of  # noqa: F401 - re-exported (capture, diagnosis)
from gradviz.core.runtime.ownership import leave_if_forked
from gradviz.core.runtime.paths import PathError, check_length, require_regular_file
from gradviz.core.runtime.script_stage import entering

REQUIRED = ("model", "batch", "loss_fn")



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
    path, line = where if where else (None, None)
    return ScriptError(f"{what}: {describe_exception(exc)}", path=path, line=line, code=code, details=details)


def call_user(fn: Any, *args: Any, what: str, code: str, site: tuple[str, int] | None = None) -> Any:
    """``fn(*args)``; anything it raises (``sys.exit()`` included) becomes a ScriptError at the user's line.

    Only gradviz's own stops (timeout, Ctrl-C: ``core/runtime/interrupts.py``) pass through unchanged.
    In a copy of gradviz's process that the call forked (``os.fork()`` in the user's code), the copy ends
    here (``core/runtime/ownership.py``): the work is done once.
    """
    entering(what.removesuffix(" raised"), site)
    try:
        result = fn(*args)
    except Stopped:
        leave_if_forked()
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        leave_if_forked(exc)
        raise error_from_exception(exc, what, code, site) from None
    leave_if_forked()
    return result


def definition_site(obj: Any) -> tuple[str, int] | None:
    """file:line where a user's function or class was defined."""
    if isinstance(obj, type):  # a class: its `class` line (its __call__ is type's or torch's, not the user's)
        try:
            return inspect.getsourcefile(obj) or "", inspect.getsourcelines(obj)[1]
        except (OSError, TypeError):
            return None
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

    @property
    def note(self) -> str | None:
        """What gradviz invented for a model without a script (the generated script's ``GRADVIZ_NOTE``,
        a string or a function: read after the model is built, it states the token-id range found)."""
        note = getattr(self.module, "GRADVIZ_NOTE", None)
        note = note() if callable(note) else note
        return note if isinstance(note, str) and note else None

    @property
    def source(self) -> str | None:
        """What the user named for a model without a script (``mypkg.models:build``, a ``.pt2``), else None."""
        source = getattr(self.module, "GRADVIZ_SOURCE", None)
        return source if isinstance(source, str) and source else None

    def new_model(self, *, allow_meta: bool = False) -> nn.Module:
        """A fresh model: calls ``model()`` or deep-copies a module instance.

        A model with tensors on the meta device (no values) is refused unless ``allow_meta``
        (structure-only tracing asks for it).
        """
        spec = self.module.model
        if isinstance(spec, nn.Module):
            # a module object cannot be re-created; copy so callers never share state
            model = self._copy_instance(spec)
        else:
            model = call_user(spec, what="model() raised", code="script-error", site=definition_site(spec))
            if not isinstance(model, nn.Module):
                raise ScriptError(f"model() must return a torch.nn.Module, got {type(model).__name__}",
                                  **self._site(spec))
        if not allow_meta:
            self._require_values(model)
        return model

    def _copy_instance(self, instance: nn.Module) -> nn.Module:
        try:
            return copy.deepcopy(instance)
        except Exception as exc:  # a lock, an open file, a C handle: not copyable
            raise ScriptError(
                f"`model` is a {type(instance).__name__} instance that cannot be copied ({type(exc).__name__}: "
                f"{exc}); gradviz copies it so every run starts from the same weights. Define `model` as a "
                f"function or class that builds a new one (e.g. `model = {type(instance).__name__}`).",
                path=str(self.path), line=assignment_line(self.path, "model"), details=traceback.format_exc()) \
                from None

    def _require_values(self, model: nn.Module) -> None:
        meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
        if meta:
            spec = self.module.model
            path, line = ((str(self.path), assignment_line(self.path, "model")) if isinstance(spec, nn.Module)
                          else self._where(spec))
            raise ScriptError(
                f"{len(meta)} parameter(s)/buffer(s) of the model are on the meta device ({', '.join(meta[:3])}"
                f"{', ...' if len(meta) > 3 else ''}): they have shapes but no values, so there are no gradients "
                "to show. Build the model on a real device (or call model.to_empty(device='cpu') and load the "
                "weights).", path=path, line=line)

    def get_batch(self, step: int = 0) -> tuple[tuple[Any, ...], Any]:
        """``batch(step)`` checked to be ``(inputs, targets)``; inputs as a tuple."""
        fn = self.module.batch
        result = call_user(fn, step, what=f"batch({step}) raised", code="script-error", site=definition_site(fn))
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

    def compute_loss(self, model: nn.Module, inputs: tuple[Any, ...], targets: Any,
                     loss_context: Any = None) -> Any:
        """Forward and loss, through ``compute_loss`` or ``loss_fn(model(*inputs), targets)``.

        ``loss_context``: a context manager entered around the loss only (``loss_fn``), or
        around the script's whole ``compute_loss`` (where forward and loss are one call).
        Returns whatever the script returns; callers check it with ``check_loss``.
        """
        custom = self.attr("compute_loss")
        if callable(custom):
            with loss_context or nullcontext():
                return call_user(custom, model, inputs, targets, what="compute_loss raised", code="forward-error",
                                 site=definition_site(custom))
        output = call_user(model, *inputs, what="the model's forward raised", code="forward-error",
                           site=definition_site(type(model).forward))
        fn = self.module.loss_fn
        with loss_context or nullcontext():
            return call_user(fn, output, targets, what="loss_fn raised", code="forward-error",
                             site=definition_site(fn))

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
        return call_user(fn, params, what="optimizer() raised", code="script-error", site=definition_site(fn))

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


def assignment_line(path: str | os.PathLike, name: str) -> int | None:
    """The line of the last top-level assignment to ``name`` in a script (None if not found)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    line = None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            line = node.lineno
    return line


def load_script(path: str | os.PathLike) -> ModelScript:
    """Run a model script as its own module and check it defines the contract's names."""
    try:
        check_length(path, "the script")
        path = Path(path).expanduser().resolve()
        require_regular_file(path, "the script")
    except PathError as exc:
        raise ScriptError(exc.args[0]) from None
    except OSError:
        raise ScriptError(f"no such script: {path}", path=str(path)) from None
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
    script_starting()           # the CLI's --timeout starts counting here
    gc_started()                # the user's code never runs with the collector held (core/runtime/gc_pause.py)
    entering("the script's import", (str(path), 1))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit in a script is also a failed import
        leave_if_forked(exc)
        sys.modules.pop(name, None)
        if isinstance(exc, Stopped):  # gradviz's own timeout / Ctrl-C: not the script's fault
            raise
        raise error_from_exception(exc, "the script failed to import", "script-error", (str(path), 1)) from None
    leave_if_forked()
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
