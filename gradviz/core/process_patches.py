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
