"""The instrumented forward of ``check``: ``DiagnosticCapture``.

It extends ``ForwardCapture`` (module paths, source lines, graph cuts, non-finite births)
with what the checks need besides: every use of a parameter (and whether gradient
recording was on), activation statistics of ReLU / sigmoid / tanh calls (reduced to a few
numbers on the spot), in-place calls, the order modules ran in with their inputs' and
outputs' autograd nodes, and the inputs of user ``autograd.Function`` calls (so gradcheck
can test the Function on exactly what it saw; see ``customs.py``).
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from gradviz.core.trace.capture import Cut, ForwardCapture, _func_name, compiling, storage_ptr, user_location
from gradviz.core.diagnosis.customs import CustomCall, CustomCallLog
from gradviz.core.stats.sharding import ParamIndex
from gradviz.core.runtime.locations import locate
from gradviz.core.trace.inplace_watch import InplaceWatch, versions

RELU_NAMES = {"relu", "relu_"}
CLAMP_NAMES = {"clamp", "clamp_", "clamp_min", "clamp_min_", "clip", "clip_"}
SIGMOID_NAMES = {"sigmoid", "sigmoid_", "expit"}
TANH_NAMES = {"tanh", "tanh_"}
# reading a tensor's metadata is not a use of its values (FSDP2 reads every parameter's device, dtype and
# requires_grad at its first forward, called modules or not)
METADATA_READS = {"device", "dtype", "requires_grad", "shape", "size", "dim", "ndim", "is_leaf", "grad_fn", "layout",
                  "data_ptr", "stride", "storage_offset", "is_contiguous", "untyped_storage", "numel", "nelement",
                  "element_size", "is_floating_point", "is_complex", "names", "grad", "_version"}
# properties whose value is a tensor computed from the parameter's values: reading them is a use. Every
# other Tensor property is metadata (torch 2.15's FSDP2 reads ``_has_grad_dtype_override`` of each one)
TENSOR_PROPERTIES = {"data", "T", "mT", "H", "mH", "real", "imag"}
# calls after a detach that finish a trip out of autograd
ROUNDTRIP_NAMES = {"numpy", "tolist", "item"}


# ---------------------------------------------------------------------------
# records


@dataclass
class ParamUse:
    seq: int
    module: str
    location: str
    call: str
    grad_enabled: bool


@dataclass
class Activation:
    kind: str              # 'relu' | 'sigmoid' | 'tanh'
    call: str
    module: str
    location: str
    code: str
    node: Any              # grad_fn of the output (None under no_grad)
    shape: list[int]
    seq: int
    samples: int = 0       # values per unit (batch x positions) for relu
    units: int = 0
    dead_frac: float = 0.0     # relu: units that are 0 for every sample
    zero_frac: float = 0.0     # relu: elements that are 0
    rate: float = 1.0          # sigmoid/tanh: effective gradient rate


@dataclass
class InplaceCall:
    op: str
    module: str
    location: str
    code: str
    seq: int
    prior_node: Any        # grad_fn of the tensor before the call (what made it)
    new_node: Any
    version: int           # the tensor's version after the call
    shape: list[int]
    ptr: int


@dataclass
class ModuleCall:
    path: str
    seq_in: int
    seq_out: int | None = None
    inputs: list[tuple[bool, bool, int]] = field(default_factory=list)   # (floating, has grad, ptr)
    out_nodes: list[Any] = field(default_factory=list)
    out_ptrs: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------
# the capture


def _is_inplace(name: str, kwargs: dict) -> bool:
    if kwargs.get("inplace") is True:
        return True
    if name.startswith("__i") and name.endswith("__") and name not in ("__init__", "__iter__", "__index__",
                                                                      "__int__", "__invert__"):
        return True
    return name.endswith("_") and not name.endswith("__") and not name.startswith("_")


class DiagnosticCapture(ForwardCapture):
    """``ForwardCapture(check_finite=True)`` plus what the diagnosis checks read."""

    def __init__(self, model: nn.Module | None = None, activations: bool = True) -> None:
        super().__init__(model, check_finite=True)
        self.index_cuts = True
        self.seq = 0
        self.params = ParamIndex(model)               # FSDP2's unsharded parameters too, as they appear
        self.param_ids = self.params.names
        self.param_uses: dict[str, list[ParamUse]] = {}
        self.activations: list[Activation] = []
        self.inplace_calls: list[InplaceCall] = []
        self.module_calls: list[ModuleCall] = []
        self.node_seq: dict[Any, int] = {}          # grad_fn -> seq of the call that made it
        self.cut_seq: list[int] = []                # parallel to self.cuts
        self.cut_params: list[set[str]] = []        # parameters a cut took directly (p.detach())
        self.roundtrips: list[tuple[int, str, str, int]] = []   # (seq, call, location, input ptr)
        self.customs = CustomCallLog()                # user autograd.Function calls (see customs.py)
        self.writes = InplaceWatch()                  # in-place writes and what each node's call saw
        self.record_activations = activations

    @property
    def custom_calls(self) -> list[CustomCall]:
        return self.customs.calls

    # -- enter / exit: user Function frames are looked for up to the caller of __enter__ ----
    def __enter__(self):
        self.customs.stop = sys._getframe(1)
        return super().__enter__()

    def __exit__(self, *exc):
        self.customs.clear_frames()
        return super().__exit__(*exc)

    # -- module order ---------------------------------------------------------
    def _make_pre(self, path: str):
        base = super()._make_pre(path)

        def pre(module, args):
            base(module, args)
            if not compiling() and threading.get_ident() == self._thread:
                self.seq += 1
                facts = []
                for t in tree_flatten(args)[0]:
                    if isinstance(t, torch.Tensor):
                        facts.append((t.is_floating_point(), t.grad_fn is not None or t.requires_grad, _ptr(t)))
                self.module_calls.append(ModuleCall(path, self.seq, inputs=facts))
        return pre

    def _make_post(self, path: str):
        base = super()._make_post(path)

        def post(module, args, output):
            base(module, args, output)
            if not compiling() and threading.get_ident() == self._thread:
                for call in reversed(self.module_calls):
                    if call.path == path and call.seq_out is None:
                        call.seq_out = self.seq
                        for t in tree_flatten(output)[0]:
                            if isinstance(t, torch.Tensor):
                                call.out_nodes.append(t.grad_fn)
                                call.out_ptrs.append(_ptr(t))
                        break
        return post

    # -- every torch call -----------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if compiling() or threading.get_ident() != self._thread:
            return super().__torch_function__(func, types, args, kwargs)
        self.seq += 1
        seq = self.seq
        self.customs.see(sys._getframe(1), user_location)
        name = _func_name(func)
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        metadata = name in METADATA_READS or (getattr(func, "__name__", None) == "__get__"
                                              and name not in TENSOR_PROPERTIES)
        used = self.params.names_of(tensors) if not metadata else []
        if used:
            grad_on = torch.is_grad_enabled()
            loc = None
            for pname in used:
                uses = self.param_uses.setdefault(pname, [])
                if len(uses) < 4:
                    loc = loc or self._user_location()
                    uses.append(ParamUse(seq, self._stack[-1], loc[0], name, grad_on))
        inplace = None
        if tensors and _is_inplace(name, kwargs):
            target = args[0] if args and isinstance(args[0], torch.Tensor) else tensors[0]
            inplace = (target, target.grad_fn)
        if name in ROUNDTRIP_NAMES and tensors:
            self.roundtrips.append((seq, name, self._user_location()[0], _ptr(tensors[0])))
        n_cuts = len(self.cuts)
        before = versions(tensors) if not metadata else []
        out = super().__torch_function__(func, types, args, kwargs)
        if before:
            self._see_versions(name, seq, tensors, before, out)
        if name == "data" and tensors and tensors[0].requires_grad and isinstance(out, torch.Tensor):
            src = tensors[0]
            self.cuts.append(Cut("data", self._stack[-1], *self._user_location(),
                                 input_nodes=[src.grad_fn] if src.grad_fn is not None else [],
                                 storage=[_ptr(out)]))
        for _ in range(len(self.cuts) - n_cuts):
            self.cut_seq.append(seq)
            self.cut_params.append(set(used))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for t in outs:
            if isinstance(t, torch.Tensor) and t.grad_fn is not None and t.grad_fn not in self.node_seq:
                self.node_seq[t.grad_fn] = seq
        if inplace is not None:
            target, prior = inplace
            loc, code = self._user_location()
            self.inplace_calls.append(InplaceCall(name, self._stack[-1], loc, code, seq, prior, target.grad_fn,
                                                  int(target._version), list(target.shape), _ptr(target)))
        if self.record_activations and isinstance(out, torch.Tensor) and out.is_floating_point():
            self._activation(name, args, kwargs, out, seq)
        return out

    def _see_versions(self, name: str, seq: int, tensors: list, before: list[int], out: Any) -> None:
        """Writes this call made (versions that rose) and, when it made a node, what that node can have saved."""
        if versions(tensors) != before:
            where = locate(sys._getframe(2))
            self.writes.see_writes(tensors, before, (self._stack[-1], where.user, where.code, where.library), name, seq)
        outs = [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]
        if any(t.grad_fn is not None for t in outs):
            self.writes.see_call(seq, tensors, before, outs)

    def _activation(self, name: str, args: tuple, kwargs: dict, out: torch.Tensor, seq: int) -> None:
        if name in RELU_NAMES:
            kind = "relu"
        elif name in CLAMP_NAMES:
            lo = kwargs.get("min", args[1] if len(args) > 1 else None)
            hi = kwargs.get("max", args[2] if len(args) > 2 else None)
            if not (isinstance(lo, (int, float)) and lo == 0 and hi is None):
                return
            kind = "relu"
        elif name in SIGMOID_NAMES:
            kind = "sigmoid"
        elif name in TANH_NAMES:
            kind = "tanh"
        else:
            return
        y = out.detach()
        if y.numel() == 0:
            return
        loc, code = self._user_location()
        rec = Activation(kind, name, self._stack[-1], loc, code, out.grad_fn, list(y.shape), seq)
        with torch.no_grad():
            if kind == "relu":
                if y.dim() < 2:
                    return
                dim = -1 if y.dim() == 3 else 1
                units = y.movedim(dim, -1).reshape(-1, y.shape[dim])
                rec.samples, rec.units = units.shape
                rec.dead_frac = float((units <= 0).all(dim=0).float().mean())
                rec.zero_frac = float((units <= 0).float().mean())
            elif kind == "sigmoid":
                yf = y.float()
                rec.rate = float(((yf * (1 - yf)) > 0.05).float().mean())
            else:  # tanh'(x) = 1 - tanh^2 = 4 sigmoid'(2x): the same 20 %-of-the-maximum cut-off
                yf = y.float()
                rec.rate = float(((1 - yf * yf) > 0.2).float().mean())
        self.activations.append(rec)


_ptr = storage_ptr
