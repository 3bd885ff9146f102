"""Which writes changed a tensor autograd had saved: provenance from torch's version counters.

Every tensor has a version counter that its views and aliases share; each in-place write to
any of them (``out[:, :h] = ...``, ``x /= d``, ``copy_``, ``relu_``, ``out=`` ops) adds one.
When backward meets a saved tensor whose version differs from the one it was saved at, torch
raises "... is at version V; expected version E". So the writes that broke it are exactly the
writes to that storage that brought its version from E+1 up to V: a write made before the save
(version <= E) is harmless and never blamed.

``InplaceWatch`` is fed by the forward capture's torch-function mode (no torch internals, no
saved-tensor hooks: with those installed torch skips its own version check, and ``torch.func``
refuses to run): for each call it reads the versions of the tensors passed in (keyword ``out=``
included) before and after, recording a ``Write`` for each that rose, and for each call that
made an autograd node, the storage, version and shape of its inputs and outputs (``Saved``:
what that node can have saved).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

MAX_CALLS = 200_000


@dataclass
class Write:
    """One call that changed a tensor's values in place."""

    op: str
    module: str
    location: str          # the user's file:line
    code: str
    library: str           # the innermost library frame, '' when none
    seq: int
    ptr: int               # storage address (views share their base's)
    version: int           # the version after the write
    shape: list[int] = field(default_factory=list)


@dataclass
class Saved:
    """A tensor a node's forward call took or made, as it was at that call."""

    seq: int
    ptr: int
    version: int
    shape: list[int]
    maker: Any = None      # the tensor's grad_fn then: the node that made it


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):   # sparse, nested, functorch-wrapped tensors
        return 0


def versions(tensors: list) -> list[int]:
    """The version of each tensor (-1 for one without a counter, e.g. an inference tensor)."""
    out = []
    for t in tensors:
        try:
            out.append(int(t._version))
        except (RuntimeError, AttributeError):
            out.append(-1)
    return out


class InplaceWatch:
    """Writes and what each node's call saw, in forward order."""

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.calls: dict[int, list[Saved]] = {}        # seq -> tensors of that call

    def see_writes(self, tensors: list, before: list[int], where: tuple[str, str, str, str], op: str,
                   seq: int) -> list[Write]:
        """After call ``op``: a Write for each tensor whose version rose. ``where`` = (module, loc, code, lib)."""
        found = []
        for t, v0, v1 in zip(tensors, before, versions(tensors)):
            if v1 > v0 >= 0:
                w = Write(op, where[0], where[1], where[2], where[3], seq, _ptr(t), v1, list(t.shape))
                if not any(x.ptr == w.ptr and x.version == w.version for x in found):   # x passed twice
                    found.append(w)
        self.writes += found
        return found

    def see_call(self, seq: int, inputs: list, before: list[int], outputs: list) -> None:
        """A call that made an autograd node: its inputs (as they were before it) and its outputs."""
        if len(self.calls) >= MAX_CALLS:
            return
        rows = [Saved(seq, _ptr(t), v, list(t.shape), t.grad_fn) for t, v in zip(inputs, before)]
        rows += [Saved(seq, _ptr(t), v, list(t.shape), t.grad_fn) for t, v in zip(outputs, versions(outputs))]
        self.calls[seq] = rows

    def culprits(self, shape: list[int] | None, version: int | None, expected: int | None,
                 prefer_seq: int | None = None) -> tuple[Saved | None, list[Write]]:
        """The saved tensor torch's error is about, and the writes after its save that changed it.

        ``shape``/``version``/``expected`` come from the error; ``prefer_seq`` is the call that made the
        node backward was running (the node that saved the tensor)."""
        def fits(s: Saved) -> bool:
            return (shape is None or s.shape == shape) and (expected is None or s.version == expected)

        order = ([prefer_seq] if prefer_seq in self.calls else []) + sorted(self.calls, reverse=True)
        for seq in order:
            for s in self.calls[seq]:
                if not fits(s) or not s.ptr:
                    continue
                after = [w for w in self.writes if w.ptr == s.ptr and w.seq > s.seq and w.version > s.version
                         and (version is None or w.version <= version)]
                if after:
                    return s, after
        return None, []
