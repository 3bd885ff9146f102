"""Watch a forward pass: which module and which line of user code made each autograd node.

A ``TorchFunctionMode`` sees every torch call in forward; per-module forward hooks keep
the current module path. For each call whose output has a new ``grad_fn`` we walk back
through nodes not yet seen (ops torch made internally, e.g. ``log_softmax`` inside
``cross_entropy``) and give them the same origin. Calls that cut the graph (``detach``,
``numpy``, ``item``, ``argmax``, entering ``no_grad``) are recorded as ``cuts``.

Everything installed here is removed on exit, even when the user's code raises.
"""
from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from gradviz.core.locations import locate

# calls whose result carries no gradient back to their input
CUT_OPS = {
    "detach", "detach_", "numpy", "item", "tolist", "argmax", "argmin", "argsort",
    "_set_grad_enabled", "__bool__", "__int__", "__float__", "round", "sign", "floor", "ceil",
    "eq", "ne", "lt", "le", "gt", "ge", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
    "bucketize", "searchsorted", "topk_indices", "nonzero", "where_indices",
}


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


@dataclass
class NonFinite:
    """Where non-finite values were born in forward (``ForwardCapture(check_finite=True)``).

    ``inputs_finite`` is False when the op's inputs were already non-finite but came
    from outside the captured ops (the batch, a parameter or a buffer).
    """

    op: str                 # the torch call, e.g. 'log'
    module: str
    location: str
    code: str
    kind: str               # 'nan' or 'inf' (nan wins when both)
    node: Any               # grad_fn of the output, or None
    inputs_finite: bool
    shape: list[int] = field(default_factory=list)
    count: int = 0          # non-finite elements in the output


def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":  # property access, e.g. Tensor.shape
        owner = getattr(func, "__self__", None)
        name = getattr(owner, "__name__", name)
    return name


class ForwardCapture(TorchFunctionMode):
    """Context manager recording ``origins`` (grad_fn -> Origin) and ``cuts`` during forward."""

    def __init__(self, model: nn.Module | None = None, check_finite: bool = False) -> None:
        super().__init__()
        self.model = model
        # check_finite: record where non-finite values are born (``nonfinite``, in forward order)
        self.check_finite = check_finite
        self.nonfinite: list[NonFinite] = []
        self._nf_source: dict[int, tuple[Any, int]] = {}   # id(tensor) -> (weakref, index in nonfinite)
        self.origins: dict[Any, Origin] = {}
        self.cuts: list[Cut] = []
        self.module_inputs: dict[str, list[tuple[bool, int]]] = {}   # path -> [(has grad_fn, data_ptr)]
        self.module_outputs: dict[str, list[tuple[bool, int]]] = {}
        self._stack: list[str] = [""]
        self._handles: list[Any] = []
        self._thread = threading.get_ident()
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
            if threading.get_ident() == self._thread:
                self._stack.append(path)
                self.module_inputs.setdefault(path, []).extend(_tensor_facts(args))
        return pre

    def _make_post(self, path: str):
        def post(module, args, output):
            if threading.get_ident() == self._thread and len(self._stack) > 1:
                self._stack.pop()
                self.module_outputs.setdefault(path, []).extend(_tensor_facts(output))
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

    def _remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    # -- the mode -----------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if threading.get_ident() != self._thread:
            return out
        name = _func_name(func)
        if name in CUT_OPS:
            self._record_cut(name, args, out)
        if self.check_finite:
            self._check_finite(name, args, kwargs, out)
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
                if nxt is not None and nxt not in origins and not hasattr(nxt, "variable"):
                    todo.append(nxt)

    def _record_cut(self, name: str, args: tuple, out: Any) -> None:
        if name == "_set_grad_enabled":
            enabled = bool(args[0]) if args else None
            self.cuts.append(Cut("no_grad" if enabled is False else "enable_grad", self._stack[-1],
                                 *self._user_location(), grad_enabled=enabled))
            return
        tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
        inputs = [a.grad_fn for a in tensors if a.grad_fn is not None]
        if not inputs and not any(a.requires_grad for a in tensors):
            return  # nothing was cut: the input carried no gradient anyway
        storage = []
        if isinstance(out, torch.Tensor) and out.grad_fn is None:
            try:
                storage.append(out.untyped_storage().data_ptr())
            except Exception:
                pass
        elif hasattr(out, "__array_interface__"):
            storage.append(out.__array_interface__["data"][0])
        self.cuts.append(Cut(name, self._stack[-1], *self._user_location(), input_nodes=inputs, storage=storage))

    # -- non-finite values (check_finite=True) ------------------------------
    @property
    def first_nonfinite(self) -> NonFinite | None:
        return self.nonfinite[0] if self.nonfinite else None

    def nonfinite_origin(self, tensor: Any) -> NonFinite | None:
        """The birth of the non-finite values in ``tensor`` (an output seen in forward)."""
        src = self._nf_source.get(id(tensor))
        if src is not None and src[0]() is tensor:
            return self.nonfinite[src[1]]
        return self.first_nonfinite

    def _check_finite(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]
        bad = [t for t in outs if not _all_finite(t)]
        if not bad or len(self.nonfinite) >= 10_000:
            return
        source = None
        inputs_finite = True
        for a in tree_flatten((args, kwargs))[0]:
            if not isinstance(a, torch.Tensor) or not (a.is_floating_point() or a.is_complex()):
                continue
            if any(a is b for b in bad):   # an in-place op: judge the input by its record
                known = self._nf_source.get(id(a))
                if known is not None and known[0]() is a:
                    source = known[1]
                    break
                continue
            if not _all_finite(a):
                inputs_finite = False
                known = self._nf_source.get(id(a))
                if known is not None and known[0]() is a:
                    source = known[1]
                    break
        if source is None:
            t = bad[0]
            nan = bool(torch.isnan(t).any())
            self.nonfinite.append(NonFinite(
                name, self._stack[-1], *self._user_location(), "nan" if nan else "inf", t.grad_fn,
                inputs_finite, list(t.shape), int((~torch.isfinite(t)).sum())))
            source = len(self.nonfinite) - 1
        for t in bad:
            try:
                self._nf_source[id(t)] = (weakref.ref(t), source)
            except TypeError:
                pass

    def _user_location(self) -> tuple[str, str]:
        return user_location(sys._getframe(2))


def user_location(frame: Any) -> tuple[str, str]:
    """``(file:line, code)`` of the innermost user frame from ``frame`` outward (within the
    user's call: never gradviz's own frames or its launcher), or ``("", "")``."""
    where = locate(frame)
    return where.user, where.code


def _all_finite(t: torch.Tensor) -> bool:
    """True when every element is finite; a sum first (cheap), the full test only if it is not."""
    try:
        with torch.no_grad():
            if bool(torch.isfinite(t.sum())):
                return True
            return bool(torch.isfinite(t).all())
    except Exception:
        return True


def _tensor_facts(obj: Any) -> list[tuple[bool, int]]:
    """(has grad_fn, storage pointer) of each floating tensor in a module's args/outputs."""
    facts = []
    for t in tree_flatten(obj)[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            try:
                ptr = t.untyped_storage().data_ptr()
            except Exception:
                ptr = 0
            facts.append((t.grad_fn is not None or t.requires_grad, ptr))
    return facts
