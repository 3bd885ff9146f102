"""Follow cut-off parameters through a forward pass, call by call, to where they were cut.

``CutTape`` is a ``ForwardCapture`` given the parameters the loss does not reach. It
marks them *tainted* and, at every torch call that takes a tainted tensor:

- with gradient recording on and an output that requires grad: a **branch op** — the
  computation carries the parameter's gradient on, so its outputs are tainted and *live*;
- with recording on and no output that requires grad (``detach``, ``.data``, ``numpy``,
  ``item``, ``argmax``, comparisons...): a **cut** — where the gradient stopped;
- with recording off (inside ``torch.no_grad()``): a branch op of that ``no_grad``
  region, whose outputs are tainted but *dead*; the region (its ``with`` line, which the
  base capture records) is the cut, and the branch ends where a dead tensor is next used
  with recording on.

A live tainted tensor used by a grad-enabled call never meets a dead one's fate: the
distinction is what keeps the branch to the computation between the parameter and the cut.
Each cut remembers the first grad-enabled call that consumed what it produced
(``consumer``: that call's output ``grad_fn``), where the main graph carries on.
Only tainted tensors and cut outputs are held (to keep their ``id`` unique), not the tape.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from gradviz.core.trace.capture import CUT_OPS, ForwardCapture, _func_name
from gradviz.core.trace.walk import readable_label

MAX_BRANCH_OPS = 2000     # a cut-off recurrent loop is drawn up to this many ops, then summarised


@dataclass
class BranchOp:
    key: str                     # node id it gets: cut-op:<k>
    call: str
    label: str
    op: str                      # the autograd node's name ('' under no_grad)
    module: str
    location: str
    code: str
    grad_enabled: bool
    shape: list[int]
    dtype: str
    sources: list[Any] = field(default_factory=list)    # per tensor input: a key, ('fn', grad_fn), ('input', i)
    region: int | None = None    # no_grad region (index into CutTape.cuts) for ops computed without recording


@dataclass
class CutPoint:
    key: str                     # cut:<j>
    call: str                    # detach, data, numpy, item, argmax, ..., or no_grad
    module: str
    location: str
    code: str
    sources: list[Any] = field(default_factory=list)
    consumer: Any = None         # grad_fn of the first grad-enabled call that used what the cut made
    then: list[str] = field(default_factory=list)   # calls on the cut's result before it is used (cpu, numpy)


class CutTape(ForwardCapture):
    """Forward capture that follows ``params`` (cut off from the loss) to their cuts."""

    def __init__(self, model: nn.Module, params: list[str], inputs: tuple = ()) -> None:
        super().__init__(model)
        named = dict(model.named_parameters())
        self.param_keys = {id(named[n]): f"param:{n}" for n in params if n in named}
        self.input_index = {id(t): i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
        self.input_facts = {i: (list(t.shape), str(t.dtype).replace("torch.", ""))
                            for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
        self.ops: list[BranchOp] = []
        self.cut_points: list[CutPoint] = []
        self.truncated = False
        # id(tensor) -> (tensor, key of the node that made it, live?)
        self._taint: dict[int, tuple[torch.Tensor | None, str, bool]] = {k: (None, v, True)
                                                                       for k, v in self.param_keys.items()}
        self._cut_out: dict[int, tuple[Any, int]] = {}      # id(cut output) -> (object, cut point index)
        self._region_cut: dict[int, int] = {}               # no_grad region -> its cut point index
        self._op_index: dict[str, BranchOp] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if threading.get_ident() != self._thread:
            return out
        name = _func_name(func)
        if name in ("_set_grad_enabled",):
            return out
        tensors = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
        tainted = [self._taint[id(t)] for t in tensors if id(t) in self._taint and self._alive(t)]
        if tainted:
            self._follow(name, tensors, out)
        if self._cut_out:
            self._consume(name, tensors, out)
        return out

    def _alive(self, t: torch.Tensor) -> bool:
        held = self._taint[id(t)][0]
        return held is None or held is t          # None: a parameter (held by the model)

    # -- one call that takes a tainted tensor -------------------------------------------
    def _follow(self, name: str, tensors: list[torch.Tensor], out: Any) -> None:
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        grad_on = torch.is_grad_enabled()
        live_in = any(self._taint[id(t)][2] for t in tensors if id(t) in self._taint and self._alive(t))
        if grad_on and not live_in:
            self._end_regions(tensors, outs)          # a dead (no_grad) tensor used with recording on
            return
        if not outs and name not in CUT_OPS:
            return                                    # a question about the tensor (shape, size, dim...)
        if grad_on and not any(t.requires_grad for t in outs):
            self._cut(name, tensors, out)
            return
        if len(self.ops) >= MAX_BRANCH_OPS:
            self.truncated = True
            return
        first = outs[0] if outs else None
        fn = first.grad_fn if first is not None else None
        loc, code = self._user_location()
        op = BranchOp(f"cut-op:{len(self.ops)}", name, readable_label(fn) if fn is not None else name,
                      fn.name() if fn is not None else "", self._stack[-1], loc, code, grad_on,
                      list(first.shape) if first is not None else [],
                      str(first.dtype).replace("torch.", "") if first is not None else "",
                      [self._source(t) for t in tensors])
        if not grad_on:
            op.region = self._region()
        self.ops.append(op)
        self._op_index[op.key] = op
        for t in outs:
            self._taint[id(t)] = (t, op.key, grad_on)

    def _cut(self, name: str, tensors: list[torch.Tensor], out: Any) -> None:
        loc, code = self._user_location()
        j = len(self.cut_points)
        self.cut_points.append(CutPoint(f"cut:{j}", name, self._stack[-1], loc, code,
                                        [self._source(t) for t in tensors if id(t) in self._taint]))
        for t in tensors:           # in place (``h.detach_()``): the same object now holds the cut's result
            if t is out or (isinstance(out, (tuple, list)) and any(t is o for o in out)):
                self._taint.pop(id(t), None)
        self._hold_cut_output(out, j)

    def _hold_cut_output(self, out: Any, j: int) -> None:
        for t in tree_flatten(out)[0] if isinstance(out, (tuple, list, torch.Tensor)) else [out]:
            if t is not None and not isinstance(t, (int, float, bool)):
                self._cut_out[id(t)] = (t, j)

    def regions(self) -> dict[int, CutPoint]:
        """no_grad region (index into ``cuts``) -> the cut point standing for it."""
        return {region: self.cut_points[j] for region, j in self._region_cut.items()}

    def _region(self) -> int:
        """The cut point standing for the current ``no_grad`` region (made on its first op)."""
        region = max((i for i, c in enumerate(self.cuts) if c.op == "no_grad"), default=-1)
        if region not in self._region_cut:
            cut = self.cuts[region] if region >= 0 else None
            j = len(self.cut_points)
            self.cut_points.append(CutPoint(f"cut:{j}", "no_grad", cut.module if cut else self._stack[-1],
                                            cut.location if cut else "", cut.code if cut else ""))
            self._region_cut[region] = j
        return region

    def _end_regions(self, tensors: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        """Dead tensors from a no_grad region meet recording again: that call is the region's consumer."""
        for t in tensors:
            got = self._taint.get(id(t))
            if got is None or got[2] or not self._alive(t):
                continue
            op = self._op_index.get(got[1])
            if op is None or op.region is None:
                continue
            point = self.cut_points[self._region_cut[op.region]]
            if outs and outs[0].grad_fn is not None:
                if point.consumer is None:
                    point.consumer = outs[0].grad_fn
            else:                                     # still no gradient (e + a): it stands for the region
                for o in outs:
                    self._taint[id(o)] = (o, op.key, False)

    def _consume(self, name: str, tensors: list[torch.Tensor], out: Any) -> None:
        """What a cut produced, used again: a grad-enabled result is where the main graph goes on;
        a result without gradient (``z = h.detach() * 2``) still stands for the cut."""
        hits = [self._cut_out[id(t)] for t in tensors if id(t) in self._cut_out and self._cut_out[id(t)][0] is t]
        if not hits:
            return
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        into = _written_into(name, tensors)
        if into is not None and not any(into is t for t, _ in hits):
            outs = [into]                   # ``buf[:, :8] = h.detach()``, ``buf.copy_(...)``: buf holds it now
            out = into
        for _, j in hits:
            point = self.cut_points[j]
            if outs and outs[0].grad_fn is not None and torch.is_grad_enabled():
                if point.consumer is None:
                    point.consumer = outs[0].grad_fn
            else:
                if len(point.then) < 4 and point.consumer is None:
                    point.then.append(name)
                self._hold_cut_output(out, j)

    def _source(self, t: torch.Tensor) -> Any:
        got = self._taint.get(id(t))
        if got is not None and self._alive(t):
            return got[1]
        if id(t) in self.input_index:
            return ("input", self.input_index[id(t)])
        if t.grad_fn is not None:
            return ("fn", t.grad_fn)
        return None


def _written_into(name: str, tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor an in-place call writes into (``buf[i] = v``, ``buf.copy_(v)``, ``buf.add_(v)``), or None."""
    if not tensors:
        return None
    if name == "__setitem__" or (name.endswith("_") and not name.startswith("_")):
        return tensors[0]
    return None
