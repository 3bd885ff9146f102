"""The backward tap: hands the next backward of a thread to the ``watch`` waiting for it.

``watch`` is called after backward (``loss.backward(); w.step(loss)``), yet the per-node
norms of a sampled step need hooks on the graph *before* its backward runs. So the
``w.step`` before a sampled step makes its ``NodeRecording`` wait for the next backward of
this thread, by one of two mechanisms:

* the ``backward-tap`` process patch (the fast path, ``gradviz.core.runtime.process_patches``):
  ``torch.autograd.backward``, which ``Tensor.backward`` calls through the module attribute
  on every supported torch, is swapped for a pass-through dispatcher while some watch waits,
  and put back when none does; the dispatcher calls ``_route`` here. Installing it checks
  once that ``Tensor.backward`` really goes through it; if not (a future torch), or if the
  swap fails, it is not tried again in this process;
* the slower path: a ``TorchFunctionMode`` pushed from ``w.step`` that sees the
  ``Tensor.backward`` call (it routes every op of the sampled step's forward through Python,
  ~2x a small model's forward on the sampled steps only). A warning says once why.

Either way, each waiting owner's ``sampled_backward(root, run)`` gets the call in arming
order: it places its hooks when the graph holds its parameters (else it keeps waiting) and
calls ``run()``, which continues to the next owner and finally to torch's backward.
Calls from other threads pass straight through.
"""
from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Callable, Protocol

import torch
from torch.overrides import TorchFunctionMode

from gradviz.core.runtime.process_patches import BACKWARD_TAP, StillWrapped, set_backward_handler

log = logging.getLogger(__name__)

__all__ = ["BackwardTap", "TapOwner"]


class TapOwner(Protocol):
    def sampled_backward(self, root: Any, run: Callable[[], None]) -> None:
        """Call ``run()`` (the backward) exactly once. When ``root``'s graph is the owner's, it
        first stops waiting (``BackwardTap.disarm``: a backward nested in this one, e.g. a
        reentrant checkpoint's, then passes through) and hooks the graph."""


_thread_id = threading.get_ident
_waiting: dict[int, list[weakref.ref]] = {}       # thread id -> owners waiting there, in arming order
_state = {"failed": False}                        # the patch could not be installed: the slower path


def _root(args: tuple, kwargs: dict) -> Any:
    root = args[0] if args else kwargs.get("tensors")
    if isinstance(root, (tuple, list)) and len(root) == 1:
        root = root[0]
    return root


def _offer(owners: list[weakref.ref], root: Any, backward: Callable[[], Any]) -> Any:
    """Offer one backward to each waiting owner in turn (each may hook the graph), then run it."""
    result: list = [None]
    if len(owners) == 1:
        # the usual case (one watch, or ``gradviz run``'s doctor on every backward): no recursion
        owner = owners[0]()
        if owner is None:
            return backward()

        def once() -> None:
            result[0] = backward()

        owner.sampled_backward(root, once)
        return result[0]

    def run(i: int) -> None:
        while i < len(owners):
            owner = owners[i]()
            i += 1
            if owner is not None:
                owner.sampled_backward(root, lambda: run(i))
                return
        result[0] = backward()

    try:
        run(0)
    finally:
        # ``run`` refers to itself through its closure cell: a reference cycle holding ``root`` (the loss,
        # and so its graph) until the cycle collector runs. Clearing the cell frees the graph at once.
        del run
    return result[0]


def _route(original: Callable, tensors: Any, args: tuple, kwargs: dict) -> Any:
    """The backward tap's handler (``process_patches``): this thread's waiting owners, if any."""
    owners = _waiting.get(_thread_id())
    if not owners:
        return original(tensors, *args, **kwargs)
    if len(owners) == 1:
        # the usual call (one owner: ``gradviz run``'s doctor on every backward): no copy of the owners, no
        # argument re-packing, one closure
        owner = owners[0]()
        if owner is None:
            return original(tensors, *args, **kwargs)
        result: list = [None]

        def once() -> None:
            result[0] = original(tensors, *args, **kwargs)

        owner.sampled_backward(tensors[0] if isinstance(tensors, (tuple, list)) and len(tensors) == 1 else tensors,
                               once)
        return result[0]
    return _offer(list(owners), _root((tensors,) + args, kwargs), lambda: original(tensors, *args, **kwargs))


set_backward_handler(_route)


class _ModeTap(TorchFunctionMode):
    """The slower path: sees ``Tensor.backward`` as a torch function call (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.backward and _waiting.get(threading.get_ident()):
            return _offer(list(_waiting[threading.get_ident()]), _root(args, kwargs),
                          lambda: func(*args, **kwargs))
        return func(*args, **kwargs)


_MODES: dict[int, _ModeTap] = {}           # thread id -> the mode pushed there (slower path only)


def _forget(ref: weakref.ref) -> None:
    """An owner was garbage-collected while waiting: its entry goes, and the tap with the last one."""
    for tid, owners in list(_waiting.items()):
        owners[:] = [r for r in owners if r is not ref]
        if not owners:
            del _waiting[tid]
            _undo_when_idle()


def _undo_when_idle() -> None:
    """No owner waits in any thread: torch's backward is its own again."""
    if not _waiting:
        try:
            BACKWARD_TAP.undo()
        except StillWrapped as exc:
            log.debug("backward tap left installed (inert): %s", exc)


class BackwardTap:
    """Arms and disarms the wait of one owner (a ``NodeRecording``) in its thread."""

    def __init__(self, owner: TapOwner, slow_path: bool = True) -> None:
        self._ref = weakref.ref(owner, _forget)     # an owner dropped unclosed stops waiting
        self.thread = threading.get_ident()
        self.waiting = False
        # False (the loop doctor's): without the patch this owner does without the backwards rather
        # than slow the forwards of the steps it checks down with a TorchFunctionMode
        self.slow_path = slow_path

    def arm(self) -> None:
        """Wait for the next backward of the calling thread."""
        self.thread = tid = threading.get_ident()
        if not self.waiting:
            _waiting.setdefault(tid, []).append(self._ref)
            self.waiting = True
        if not _state["failed"]:
            if BACKWARD_TAP.apply():
                return
            _state["failed"] = True           # (apply logged why) not tried again in this process
            log.warning("gradviz.watch: the backward tap is unavailable; sampled steps see backward through a "
                        "TorchFunctionMode instead (a slower forward on sampled steps only)")
        if not self.slow_path:
            self.disarm()
            return
        if tid not in _MODES:
            mode = _MODES[tid] = _ModeTap()
            mode.__enter__()

    @property
    def pending(self) -> bool:
        """Waiting, or the slower path's mode is still pushed: ``disarm`` has work to do."""
        return self.waiting or self.thread in _MODES

    def disarm(self) -> None:
        """Stop waiting (the backward came, or the step ended without one). Called from inside
        the backward, the slower path's mode cannot leave yet (torch has it off the stack
        then): the next call, from ``w.step``, takes it off."""
        tid = self.thread
        if self.waiting:
            self.waiting = False
            owners = _waiting.get(tid)
            if owners is not None:
                owners[:] = [r for r in owners if r is not self._ref and r() is not None]
                if not owners:
                    del _waiting[tid]
            _undo_when_idle()
        if tid not in _waiting:
            _pop_mode(tid)


def _pop_mode(tid: int) -> None:
    """Leave the slower path's mode of thread ``tid`` when it is on top of that thread's stack."""
    mode = _MODES.get(tid)
    if mode is None or tid != threading.get_ident():
        return
    if torch.overrides._get_current_function_mode() is mode:
        del _MODES[tid]
        mode.__exit__(None, None, None)
    else:       # the user pushed a mode of their own since: ours stays, inert, until it is on top again
        log.debug("gradviz.watch: a TorchFunctionMode above the tap's; leaving it in place (inert)")
