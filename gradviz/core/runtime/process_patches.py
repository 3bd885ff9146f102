"""Every process-wide change gradviz makes to torch, Qt or Python, in one place.

gradviz prefers public mechanisms (hooks, ``TorchFunctionMode``, node pre-hooks). Where a
change must reach the whole process, it is declared here as a ``ProcessPatch``: why it
exists, how it is installed and how it is undone. Each is tested on every supported torch.
If installing one fails, the caller gets ``False`` and a logged reason and takes its slower
path; the user's own code is never made to fail by a patch.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

__all__ = ["ProcessPatch", "PATCHES", "register"]


@dataclass
class ProcessPatch:
    name: str
    why: str                         # one sentence: what breaks or is slow without it
    install: Callable[[], None]      # raises if it cannot be installed
    uninstall: Callable[[], None]    # restores exactly what install changed
    installed: bool = field(default=False, init=False)

    def apply(self) -> bool:
        """Install; ``False`` (and a logged reason) when it cannot be, so the caller degrades."""
        if self.installed:
            return True
        try:
            self.install()
        except Exception as exc:  # noqa: BLE001 - a patch must never break the user's program
            log.warning("cannot install %s (%s); using the slower path", self.name, exc)
            return False
        self.installed = True
        return True

    def undo(self) -> None:
        if self.installed:
            self.uninstall()
            self.installed = False


PATCHES: dict[str, ProcessPatch] = {}


def register(patch: ProcessPatch) -> ProcessPatch:
    """Declare a patch (at import of the module that needs it); returns it for use."""
    PATCHES[patch.name] = patch
    return patch


# -- the window: cyclic garbage collected in the GUI thread only (app/gc_guard.py) ----------

_gc_state = {"was_enabled": True}


def _gc_off() -> None:
    import gc

    _gc_state["was_enabled"] = gc.isenabled()
    gc.disable()


def _gc_back() -> None:
    import gc

    if _gc_state["was_enabled"]:
        gc.enable()


GC_IN_GUI_THREAD = register(ProcessPatch(
    name="gui-thread-gc",
    why="Python's cycle collector runs in whichever thread allocates; run in a trace or training thread it "
        "destroys Qt objects of closed windows while the GUI thread paints, which can crash the process. "
        "While a window lives, automatic collection is off and its GUI-thread timer collects instead.",
    install=_gc_off,
    uninstall=_gc_back,
))


# -- watch(): the backward tap (core/record/tap.py routes what it hands over) ---------------

_tap: dict = {"original": None, "handler": None, "probing": False, "seen": False}


def set_backward_handler(handler) -> None:
    """``handler(original, tensors, args, kwargs)`` runs each backward while the tap is installed."""
    _tap["handler"] = handler


def backward_dispatch(tensors, *args, **kwargs):
    """What ``torch.autograd.backward`` is while the backward tap is installed."""
    original = _tap["original"]
    handler = _tap["handler"]
    if handler is None or _tap["probing"]:
        _tap["seen"] = True
        return original(tensors, *args, **kwargs)
    return handler(original, tensors, args, kwargs)


def _tap_install() -> None:
    import torch

    if torch.autograd.backward is backward_dispatch:
        return
    _tap["original"] = torch.autograd.backward
    torch.autograd.backward = backward_dispatch
    if not _tap["seen"]:
        _tap_probe()


def _tap_probe() -> None:
    """Check once that ``Tensor.backward`` calls the swapped function (raises if not)."""
    import torch

    _tap["probing"] = True
    try:
        x = torch.zeros(1, requires_grad=True)
        with torch.enable_grad():
            (x * 1.0).sum().backward()
    finally:
        _tap["probing"] = False
    if not _tap["seen"]:
        _tap_uninstall()
        raise RuntimeError(f"Tensor.backward does not call torch.autograd.backward on torch {torch.__version__}")


class StillWrapped(RuntimeError):
    """Something swapped ``torch.autograd.backward`` over the dispatcher: it stays, inert."""


def _tap_uninstall() -> None:
    import torch

    current = torch.autograd.backward
    if current is backward_dispatch:
        torch.autograd.backward = _tap["original"]
    elif _tap["original"] is not None and current is not _tap["original"]:
        # another wrapper (which may call ours) was put over it: taking ours out would break that
        # chain, putting ours in again would loop; so the dispatcher stays installed, passing through
        raise StillWrapped(f"torch.autograd.backward is now {current!r}")


BACKWARD_TAP = register(ProcessPatch(
    name="backward-tap",
    why="watch() is called after backward, but the per-node gradient norms of a sampled step need hooks "
        "on its graph before the backward runs: torch.autograd.backward (what Tensor.backward calls) is "
        "swapped for a pass-through while a watch waits for its sampled step (a module attribute, not "
        "Tensor's: writing a class attribute resets every cached method lookup on tensors)",
    install=_tap_install,
    uninstall=_tap_uninstall,
))
