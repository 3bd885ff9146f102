"""Watch a forward pass: which module and which line of user code made each autograd node.

A ``TorchFunctionMode`` sees every torch call in forward; per-module forward hooks keep
the current module path. For each call whose output has a new ``grad_fn`` we walk back
through nodes not yet seen (ops torch made internally, e.g. ``log_softmax`` inside
``cross_entropy``) and give them the same origin. Calls that cut the graph (``detach``,
``numpy``, ``item``, ``argmax``, entering ``no_grad``) are recorded as ``cuts``.

Everything installed here is removed on exit, even when the user's code raises.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from gradviz.core.trace.finite_watch import FiniteWatch, NonFinite  # noqa: F401 (NonFinite re-exported)
from gradviz.core.runtime.locations import locate
from gradviz.core.stats.sharding import type_name
from gradviz.core.trace.walk import is_leaf

# calls whose result carries no gradient back to their input
def _dropped_in_place(func: Any, args: tuple) -> list | None:
    """``h.detach_()`` drops h's ``grad_fn`` in place: read it before the call, so the cut
    is recorded with what it cut (after the call h looks as if it never had a gradient)."""
    if not args or getattr(func, "__name__", "") != "detach_" or not isinstance(args[0], torch.Tensor):
        return None
    return [args[0].grad_fn] if args[0].grad_fn is not None else []


CUT_OPS = {
    "detach", "detach_", "numpy", "item", "tolist", "argmax", "argmin", "argsort",
    "_set_grad_enabled", "__bool__", "__int__", "__float__", "round", "sign", "floor", "ceil",
    "eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "bucketize", "searchsorted", "topk_indices", "nonzero", "where_indices",
}


_GRAD_MODE_FILE = os.path.join("torch", "autograd", "grad_mode.py")
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")


def _entered_by_checkpoint(frame: Any) -> bool:
    """Whether the grad mode change seen at ``frame`` was made by reentrant ``torch.utils.checkpoint``
    (its forward runs under no_grad, and backward runs it again with grad: nothing is cut)."""
    while frame is not None and frame.f_code.co_filename.endswith(_GRAD_MODE_FILE):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.endswith(_CHECKPOINT_FILE)


@dataclass
class Origin:
    """Where an autograd node came from in the user's forward."""

    module: str          # dotted module path ('' = the model itself)
    location: str        # 'file:line' of user code, '' when unknown
    code: str            # the line of code itself
    call: str            # the torch call that made it, e.g. 'linear'
    library: str = ""    # 'file:line' of the innermost library frame (transformers/..., torchvision/...)


@dataclass
class Cut:
    """A torch call that dropped the graph: its input had a grad_fn, its output has none."""

    op: str
    module: str
    location: str
    code: str
    input_nodes: list[Any] = field(default_factory=list)   # grad_fns of the inputs it cut
    storage: list[int] = field(default_factory=list)       # data_ptrs of detached outputs
    grad_enabled: bool | None = None                       # for _set_grad_enabled
    checkpoint: bool = False    # no_grad entered by reentrant torch.utils.checkpoint, which re-runs it with grad


def compiling() -> bool:
    """True while torch.compile traces: every hook and mode call of gradviz is then a no-op,
    so dynamo traces exactly the user's program (no graph breaks, no guards on gradviz's state)
    and the compiled region stays the one node the user's program has."""
    return _IS_COMPILING()


_IS_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":  # property access, e.g. Tensor.shape
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", name)
    return name


_FUNC_INFO: dict[Any, tuple[str, bool, bool]] = {}


def _func_info(func: Any) -> tuple[str, bool, bool]:
    """``(name, cuts the graph?, detach_?)`` of a torch function, remembered (for the few hundred the
    torch API has; a hashable func only, and not without bound)."""
    name = _func_name(func)
    info = (name, name in CUT_OPS, getattr(func, "__name__", "") == "detach_")
    if len(_FUNC_INFO) < 4096 and type(func).__hash__ is not None:    # an unhashable one: worked out every call
        _FUNC_INFO[func] = info
    return info


class ForwardCapture(TorchFunctionMode):
    """Context manager recording ``origins`` (grad_fn -> Origin) and ``cuts`` during forward."""

    def __init__(self, model: nn.Module | None = None, check_finite: bool = False) -> None:
        super().__init__()
        self.model = model
        # check_finite: record where non-finite values are born (``nonfinite``, in forward order)
        self.check_finite = check_finite
        # index_cuts: also record as cuts the calls that return integer tensors from inputs with a gradient
        # (``torch.max(x, 1)[1]``): what ``check`` explains an unreachable parameter with; the traced view
        # keeps to the named cuts (``values`` of such a call still carry the gradient)
        self.index_cuts = False
        self.finite = FiniteWatch()
        self.origins: dict[Any, Origin] = {}
        self.cuts: list[Cut] = []
        self._stack: list[str] = [""]
        self._handles: list[Any] = []
        self._thread = threading.get_ident()
        self._inert = False           # ended from inside a hook: the module hooks wait for remove_hooks()
        self._loc_cache: tuple[int, str, str] | None = None

    # -- module path --------------------------------------------------------
    def _install_module_hooks(self) -> None:
        if self.model is None:
            return
        for path, module in self.model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._make_pre(path)))
            try:
                h = module.register_forward_hook(self._make_post(path), always_call=True)
            except TypeError:  # torch < 2.1 has no always_call
                h = module.register_forward_hook(self._make_post(path))
            self._handles.append(h)

    def _make_pre(self, path: str):
        def pre(module, args):
            if not self._inert and not compiling() and threading.get_ident() == self._thread:
                self._stack.append(path)
        return pre

    def _make_post(self, path: str):
        def post(module, args, output):
            if not self._inert and not compiling() and threading.get_ident() == self._thread and len(self._stack) > 1:
                # a compiled module's output nodes were made where no op was seen: attribute them here
                for t in _leaves(output):
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn not in self.origins:
                        self._attribute(t.grad_fn, type_name(module))
                self._stack.pop()
        return post

    def __enter__(self):
        self._install_module_hooks()
        try:
            return super().__enter__()
        except BaseException:
            self._remove_hooks()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._remove_hooks()

    def end_in_hook(self) -> None:
        """End the capture from inside a module's forward hook: the mode ends now, the module hooks
        do nothing from now on and stay until ``remove_hooks()`` (called outside any forward). When
        the forward raises, torch runs the always-call hooks iterating the module's hook dict itself:
        removing a hook there raises "OrderedDict mutated during iteration" over the user's error."""
        self._inert = True
        super().__exit__(None, None, None)

    def remove_hooks(self) -> None:
        self._remove_hooks()

    def _remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    # -- the mode -----------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        # called for every torch call of the forward (25,000 times for a 200-block GPT): what depends only
        # on ``func`` is looked up once (``_func_info``), and calls without an output grad_fn end early
        if compiling():       # before the cache: dynamo would guard on its size (torch 2.6: a failed guard)
            return func(*args, **kwargs) if kwargs else func(*args)
        try:
            name, cut, drops = _FUNC_INFO[func]
        except (KeyError, TypeError):     # not seen yet (or not hashable)
            name, cut, drops = _func_info(func)
        dropped = _dropped_in_place(func, args) if drops else None
        out = func(*args, **kwargs) if kwargs else func(*args)
        if compiling() or threading.get_ident() != self._thread:
            return out
        if cut or (self.index_cuts and _made_indices(out)):
            self._record_cut(name, args, out, dropped)
        if self.check_finite:
            self._check_finite(name, args, kwargs or {}, out)
        if isinstance(out, torch.Tensor):
            fn = out.grad_fn
            if fn is not None and fn not in self.origins:
                self._attribute(fn, name)
        elif isinstance(out, (tuple, list)):
            for t in out:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn not in self.origins:
                    self._attribute(t.grad_fn, name)
        return out

    def _attribute(self, root: Any, call: str) -> None:
        """Give ``root`` and every unseen node behind it this call's origin."""
        where = locate(sys._getframe(2))
        origin = Origin(self._stack[-1], where.user, where.code, call, where.library)
        todo = [root]
        origins = self.origins
        while todo:
            fn = todo.pop()
            if fn in origins:
                continue
            origins[fn] = origin
            for nxt, _ in fn.next_functions:
                if nxt is not None and nxt not in origins and not is_leaf(nxt):
                    todo.append(nxt)

    def _record_cut(self, name: str, args: tuple, out: Any, dropped: list | None = None) -> None:
        if name == "_set_grad_enabled":
            enabled = bool(args[0]) if args else None
            self.cuts.append(Cut("no_grad" if enabled is False else "enable_grad", self._stack[-1],
                                 *self._user_location(), grad_enabled=enabled,
                                 checkpoint=_entered_by_checkpoint(sys._getframe(2))))
            return
        tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
        inputs = dropped if dropped is not None else [a.grad_fn for a in tensors if a.grad_fn is not None]
        if not inputs and not any(a.requires_grad for a in tensors):
            return  # nothing was cut: the input carried no gradient anyway
        storage = []
        if isinstance(out, torch.Tensor) and out.grad_fn is None:
            storage.append(storage_ptr(out))
        elif hasattr(out, "__array_interface__"):
            storage.append(out.__array_interface__["data"][0])
        self.cuts.append(Cut(name, self._stack[-1], *self._user_location(), input_nodes=inputs, storage=storage))

    # -- non-finite values (check_finite=True) ------------------------------
    @property
    def nonfinite(self) -> list[NonFinite]:
        return self.finite.records

    @property
    def first_nonfinite(self) -> NonFinite | None:
        return self.finite.records[0] if self.finite.records else None

    def nonfinite_origin(self, tensor: Any) -> NonFinite | None:
        """The birth of the non-finite values in ``tensor`` (an output seen in forward)."""
        return self.finite.origin_of(tensor)

    def _check_finite(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        where = locate(sys._getframe(2))
        self.finite.see(name, args, kwargs, out, (self._stack[-1], where.user, where.code, where.library))

    def _user_location(self) -> tuple[str, str]:
        return user_location(sys._getframe(2))


def user_location(frame: Any) -> tuple[str, str]:
    """``(file:line, code)`` of the innermost user frame from ``frame`` outward (within the
    user's call: never gradviz's own frames or its launcher), or ``("", "")``."""
    where = locate(frame)
    return where.user, where.code


def storage_ptr(t: torch.Tensor) -> int:
    """The storage address that links a detached tensor to its source; 0 for a tensor without one
    (sparse, nested and functorch-wrapped tensors raise on ``untyped_storage``)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return 0


def _made_indices(out: Any) -> bool:
    """Whether a call returned integer or boolean tensors (``torch.max(x, 1)[1]``, ``topk``'s indices):
    whatever carries only those has no gradient, whatever the call is named. ``_record_cut`` keeps it
    only when an input carried a gradient."""
    if isinstance(out, torch.Tensor):
        return not (out.is_floating_point() or out.is_complex()) and out.dim() > 0
    if isinstance(out, (tuple, list)):      # torch.return_types (max, topk, sort) are tuples
        return any(isinstance(t, torch.Tensor) and not (t.is_floating_point() or t.is_complex()) and t.dim() > 0
                   for t in out)
    return False


def _leaves(obj: Any) -> list:
    """``tree_flatten(obj)[0]``, without its cost for what modules mostly take and return: a tensor,
    or a tuple or list of tensors and plain values."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if type(obj) in (tuple, list) and all(isinstance(x, _FLAT) for x in obj):
        return list(obj)
    return tree_flatten(obj)[0]


_FLAT = (torch.Tensor, int, float, bool, str, type(None))
