"""Where non-finite values are born in forward (``ForwardCapture(check_finite=True)``).

Every op whose output holds NaN or ±inf is looked at once: if its non-finite inputs carry a
record, the output inherits it; otherwise this op is a birth. Two refinements make the
record name the op a user must fix:

- the first NaN is a birth of its own even when its input held ±inf: a ``-inf`` fill is
  often intentional (an attention mask), and what breaks is the op that turns it into NaN
  (a softmax over a row that is entirely ``-inf``: 0/0). The NaN's record keeps the inf's
  record as its ``cause``;
- an inf born from a non-finite scalar argument (``masked_fill(pad, float('-inf'))``,
  ``torch.full(..., -inf)``) is marked ``intentional``.

For a NaN birth the record keeps the index of its first NaN and, for a softmax-like op, the
rows of the input that held no finite value at all.
"""
from __future__ import annotations

import logging
import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

log = logging.getLogger(__name__)

MAX_RECORDS = 10_000
ROW_OPS = {"softmax", "log_softmax", "softmin", "_softmax", "_log_softmax"}


@dataclass
class NonFinite:
    """One birth of non-finite values. ``inputs_finite`` is False when the op's inputs were already
    non-finite but came from outside the captured ops (the batch, a parameter or a buffer)."""

    op: str                 # the torch call, e.g. 'log'
    module: str
    location: str
    code: str
    kind: str               # 'nan' or 'inf' (nan wins when both)
    node: Any               # grad_fn of the output, or None
    inputs_finite: bool
    shape: list[int] = field(default_factory=list)
    count: int = 0          # non-finite elements in the output
    library: str = ""       # innermost library frame (file:line)
    intentional: bool = False                     # inf from a non-finite scalar argument (a mask fill)
    cause: int | None = None                      # NaN from ±inf: index of the inf's record
    index: list[int] = field(default_factory=list)          # first NaN element
    rows: list[list[int]] = field(default_factory=list)     # softmax-like: input rows with no finite value
    row_count: int = 0
    # the first op that took these values and gave a finite float result (torch.where's other branch,
    # masked_fill, indexing): (op, module, file:line, code). Forward looks healthy, but backward multiplies
    # their gradient by 0, and 0 * inf (or 0 * nan) is NaN
    discard: tuple[str, str, str, str] | None = None


def all_finite(t: torch.Tensor) -> bool:
    """True when every element is finite; a sum first (cheap), the full test only if it is not."""
    with torch.no_grad():
        if bool(torch.isfinite(t.sum())):
            return True
        return bool(torch.isfinite(t).all())


def _floats(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0]     # meta tensors have no values to judge
            if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and not t.is_meta]


def _has_nan(t: torch.Tensor) -> bool:
    with torch.no_grad():
        return bool(torch.isnan(t).any())


class FiniteWatch:
    """The records and which tensor carries which record."""

    def __init__(self) -> None:
        self.records: list[NonFinite] = []
        self._source: dict[int, tuple[Any, int]] = {}   # id(tensor) -> (weakref, index in records)

    def origin_of(self, tensor: Any) -> NonFinite | None:
        src = self._known(tensor)
        return self.records[src] if src is not None else (self.records[0] if self.records else None)

    def _known(self, t: Any) -> int | None:
        src = self._source.get(id(t))
        return src[1] if src is not None and src[0]() is t else None

    def see(self, name: str, args: tuple, kwargs: dict, out: Any, where: tuple[str, str, str, str]) -> None:
        """After op ``name`` ran: ``where`` is (module, file:line, code, library location)."""
        outs = _floats(out if isinstance(out, (tuple, list)) else (out,))
        bad = [t for t in outs if not all_finite(t)]
        if not bad:
            if outs and self._source:
                self._discards(name, args, kwargs, where)
            return
        if len(self.records) >= MAX_RECORDS:
            return
        inputs = [a for a in _floats((args, kwargs)) if not any(a is b for b in bad)]
        in_place = [a for a in _floats((args, kwargs)) if any(a is b for b in bad)]
        bad_in = [a for a in inputs if not all_finite(a)]
        source = next((s for s in map(self._known, in_place + bad_in) if s is not None), None)
        out_nan = any(_has_nan(t) for t in bad)
        new_nan = out_nan and not any(_has_nan(a) for a in bad_in + in_place)
        # a NaN made from ±inf is a birth of its own only when that inf was put there on purpose (a mask
        # fill: the softmax over a fully masked row is what breaks); an inf born by accident (log(0), an
        # overflowing exp) stays the birth, where the NaN made from it later (-inf * 0) came from
        if source is None or (new_nan and self.records[source].kind != "nan" and self.records[source].intentional):
            cause = source
            source = self._birth(name, args, kwargs, bad, inputs_finite=not bad_in, where=where)
            self.records[source].cause = cause
        for t in bad:
            try:
                self._source[id(t)] = (weakref.ref(t), source)
            except TypeError:
                log.debug("cannot weak-reference a %s", type(t).__name__)

    def _discards(self, name: str, args: tuple, kwargs: dict, where: tuple[str, str, str, str]) -> None:
        """Op ``name`` gave a finite result from non-finite inputs with a record: it discards them."""
        for a in _floats((args, kwargs)):
            src = self._known(a)
            if src is not None and self.records[src].discard is None:
                self.records[src].discard = (name, where[0], where[1], where[2])

    def _birth(self, name: str, args: tuple, kwargs: dict, bad: list[torch.Tensor], inputs_finite: bool,
               where: tuple[str, str, str, str]) -> int:
        t = bad[0]
        nan = _has_nan(t)
        rec = NonFinite(name, where[0], where[1], where[2], "nan" if nan else "inf", t.grad_fn, inputs_finite,
                        list(t.shape), int((~torch.isfinite(t)).sum()), where[3])
        scalars = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, float)]
        rec.intentional = not nan and inputs_finite and any(math.isinf(a) for a in scalars)
        if nan:
            with torch.no_grad():
                rec.index = [int(i) for i in torch.isnan(t).nonzero()[0].tolist()]
            self._rows(rec, name, args, kwargs)
        self.records.append(rec)
        return len(self.records) - 1

    @staticmethod
    def _rows(rec: NonFinite, name: str, args: tuple, kwargs: dict) -> None:
        """For a softmax-like op: the input rows (along ``dim``) with no finite value."""
        if name not in ROW_OPS or not args or not isinstance(args[0], torch.Tensor):
            return
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if not isinstance(dim, int):
            return
        with torch.no_grad():
            empty = (~torch.isfinite(args[0])).all(dim=dim)
            found = empty.nonzero()
        rec.row_count = int(found.shape[0])
        rec.rows = [[int(i) for i in row] for row in found[:5].tolist()]
