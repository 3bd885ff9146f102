"""The bytes autograd saves for backward on a few checked steps, and how many of them are still held later.

``SavedBytes.open(step)`` pushes a ``torch.autograd.graph.saved_tensors_hooks`` pair for one loop iteration
(the loop doctor opens it after the optimizer step that starts a checked iteration and closes it after the one
that ends it, so no unchecked step pays for a hook). Every tensor autograd saves in that window goes through
``_pack``: it is wrapped in a small ``_Slot`` that the graph owns in place of the tensor, so the slot lives
exactly as long as autograd holds the saved tensor (a backward frees it; a graph kept by the loop keeps it).
The slot's finalizer keeps the count: ``live(steps)`` is the bytes of the distinct storages that
live slots of those steps hold (a storage once, however many views of it were saved; a view of a larger
storage -- a batch sliced from the data set -- counts its own bytes, not the whole data set's). Parameters
are not counted: a kept graph does not make the model's own memory.

Why the liveness of a slot and not of the storage: a storage outlives the graph whenever the user's code
keeps the tensor (a list of pre-made batches, a cache), which is no memory the graph holds, and would read
as growth while the loop first walks through such a list.

Two things the slot must do that a plain identity pack hook does not:

* it holds ``t.detach()``, never ``t`` itself: a saved *output* held as itself makes a reference cycle
  through C++ (tensor -> grad_fn -> saved slot -> tensor) that Python's collector cannot see, so a graph
  dropped without backward would never be freed (checked on torch 2.13);
* it keeps the tensor's version and ``_unpack`` compares it: with hooks installed autograd no longer checks
  that a saved tensor was not modified in place (ENGINE_NOTES), and a checked step would then give silently
  wrong gradients instead of torch's error. ``detach()`` shares the version counter, so the check holds.

A user's own saved-tensor hooks win: ``open`` does nothing while another pair is installed (only the top
pair of torch's stack runs, so pushing ours would switch theirs off, e.g. ``save_on_cpu``), and ``close``
pops only its own pair. torch has no public query of its hook stack, so both are asked of torch itself with a
probe, the same on every torch 2.x: ``hooks_installed`` saves a one-element tensor (``a * a``) and registers a
pair on that saved tensor (``grad_fn._raw_saved_self.register_hooks``, the per-tensor hooks of torch's
"Hooks for saved tensors" notes), which torch refuses when an installed pair already packed it ("hooks have
already been set"); ``close`` saves one and sees whether ``_pack`` was the hook that packed it. (torch 2.6 has
no ``_top_saved_tensors_default_hooks``; reading it, the doctor measured nothing there.)
"""
from __future__ import annotations

import logging
from typing import Iterable

import torch
from torch.autograd.graph import saved_tensors_hooks

log = logging.getLogger(__name__)

__all__ = ["SavedBytes", "size_text"]


def _identity(t):
    return t


def hooks_installed() -> bool:
    """Whether a saved-tensor hook pair is installed now (a probe: see the module's docstring)."""
    with torch.enable_grad():
        a = torch.zeros(1, requires_grad=True)
        b = a * a                                     # mul saves its inputs (b kept: torch 2.6 frees a dead
        saved = b.grad_fn._raw_saved_self             # output's saved values)
        try:
            saved.register_hooks(_identity, _identity)
        except RuntimeError as exc:
            if "already been set" in str(exc):        # a pair packed it
                return True
            raise
    return False


def _save_one() -> None:
    """Make autograd save one tensor (a leaf's: never counted), for ``close``'s probe."""
    with torch.enable_grad():
        a = torch.zeros(1, requires_grad=True)
        a * a


class _Slot:
    """What the graph holds in place of one saved tensor (its detached alias and its version then)."""
    __slots__ = ("t", "version")

    def __init__(self, t: torch.Tensor, version: int) -> None:
        self.t = t
        self.version = version


class _Counted(_Slot):
    """A counted slot: when the graph lets it go, its storage's count in ``live`` goes down (``__del__``, not a
    weak reference with a callback: half the cost, on the checked steps' every saved tensor)."""
    __slots__ = ("live", "key")

    def __init__(self, t: torch.Tensor, version: int, live: dict, key: tuple) -> None:
        self.t, self.version, self.live, self.key = t, version, live, key

    def __del__(self) -> None:
        entry = self.live.get(self.key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del self.live[self.key]


class SavedBytes:
    def __init__(self) -> None:
        self.available = True                      # (kept for callers: every torch 2.x can be probed)
        self.skipped = 0                           # windows not measured (a user's own hooks were installed)
        self._hooks: saved_tensors_hooks | None = None
        self._step: int | None = None
        self.measured: set[int] = set()            # the steps whose saved tensors were counted
        self._pack_fn = self._pack
        self._probing = False                      # close's probe: did ``_pack`` see the probe's tensor
        self._probe_seen = False
        # (step, storage pointer, device index) -> [bytes, live slots]
        self._live: dict[tuple, list[int]] = {}

    @property
    def is_open(self) -> bool:
        return self._hooks is not None

    def open(self, step: int) -> bool:
        """Measure what autograd saves from now until ``close`` as ``step``'s (False: not measured)."""
        if self._hooks is not None or not self.available:
            return False
        if hooks_installed():
            self.skipped += 1
            return False
        hooks = saved_tensors_hooks(self._pack_fn, _unpack)
        try:
            hooks.__enter__()
        except RuntimeError:        # disable_saved_tensors_hooks() is in force: no pair may be pushed
            self.skipped += 1
            return False
        self._hooks, self._step = hooks, step
        self.measured.add(step)
        return True

    def close(self) -> None:
        """Stop measuring: pop the pair if it is still the top one (a user's pair pushed inside the window and
        not yet popped stays; ours then stays under it, and a later ``close`` pops it)."""
        if self._hooks is None:
            return
        if not self._on_top():
            log.debug("gradviz: another saved-tensor hook pair is above the loop doctor's; it stays for now")
            return
        hooks, self._hooks = self._hooks, None
        hooks.__exit__(None, None, None)

    def _on_top(self) -> bool:
        """Whether our pair is the one that packs what autograd saves now."""
        self._probing, self._probe_seen = True, False
        try:
            _save_one()
        finally:
            self._probing = False
        return self._probe_seen

    def live(self, steps: Iterable[int] | None = None) -> int:
        """Bytes of the distinct storages still held for backward by the saved tensors of ``steps`` (all)."""
        wanted = None if steps is None else set(steps)
        sizes: dict[tuple, int] = {}
        for (step, ptr, device), (nbytes, _) in list(self._live.items()):
            if wanted is None or step in wanted:
                key = (ptr, device)
                if nbytes > sizes.get(key, -1):
                    sizes[key] = nbytes
        return sum(sizes.values())

    # -- the hook ----------------------------------------------------------------------
    def _pack(self, t: torch.Tensor) -> _Slot:
        if self._probing:
            self._probe_seen = True                # (the probe's tensor is a leaf: not counted below)
        base = t._base
        if base is None:
            base = t
        if (base.is_leaf and (base.requires_grad or isinstance(base, torch.nn.Parameter))) or t.is_meta:
            return _Slot(t.detach(), t._version)   # the model's own memory (or none, on meta): not counted
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            # sparse and other storage-less layouts: saved, version-checked, not counted
            log.debug("gradviz: a saved %s tensor has no storage to count", t.layout)
            return _Slot(t.detach(), t._version)
        key = (self._step, storage.data_ptr(), t.get_device())
        nbytes = t.numel() * t.element_size()
        cap = storage.nbytes()                     # (an expanded tensor's numel overstates its memory)
        if nbytes > cap:
            nbytes = cap
        entry = self._live.get(key)
        if entry is None:
            self._live[key] = [nbytes, 1]
        else:
            if nbytes > entry[0]:
                entry[0] = nbytes
            entry[1] += 1
        return _Counted(t.detach(), t._version, self._live, key)


def _unpack(slot: _Slot) -> torch.Tensor:
    t = slot.t
    if t._version != slot.version:
        # what autograd itself raises without hooks (its check is off while hooks are installed)
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{t.type()} {list(t.shape)}] is at version {t._version}; expected version {slot.version} instead "
            "(seen by gradviz's saved-tensor check on this step; torch.autograd.set_detect_anomaly(True) names the op)")
    return t


def size_text(nbytes: float) -> str:
    """``1.5 KiB``, ``3.2 MiB``: bytes for a finding's message."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"
