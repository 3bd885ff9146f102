"""What input attribution differentiates, and along which path.

``Objective`` turns a model's forward into the one scalar ``f`` the methods of
``attribution.py`` attribute: the script's loss, one output unit ``K`` (its logit,
summed over the batch and positions), each example's own label, or each example's
predicted class (fixed at the real input, so the path integral has one integrand).

``EmbeddingPath`` is how integer inputs (token ids) are attributed: they cannot move
along a path, so the output of the embedding lookup that takes them does. A
``TorchFunctionMode`` sees every ``embedding`` call (``nn.Embedding`` and
``F.embedding`` alike); a call whose ids are one of the batch's integer inputs has its
output replaced by ``base + alpha * (emb - base)`` and kept, so its gradient can be read.
"""
from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradviz.core.runtime.errors import GradvizError

log = logging.getLogger(__name__)

EMBEDDING_CALLS = {"embedding", "embedding_bag"}


class AttributionError(GradvizError):
    """Attribution cannot run on this script or with these options (the message says why)."""


def read_baseline(text: str) -> Any:
    """A baseline as the CLI and the panel take it: 'zeros', a number, or a ``.npy`` / ``.pt``
    file of tensors (one per input, or one for a single input); never unpickles code."""
    text = text.strip() or "zeros"
    if text == "zeros":
        return "zeros"
    try:
        return float(text)
    except ValueError:
        pass
    from pathlib import Path

    path = Path(text).expanduser()
    if not path.is_file():
        raise AttributionError(f"the baseline {text!r} is neither 'zeros', a number nor a file")
    try:
        if path.suffix == ".npy":
            import numpy as np

            return [torch.from_numpy(np.load(path, allow_pickle=False))]
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AttributionError(f"cannot read the baseline file {path} (.npy or tensors saved with torch.save): "
                               f"{first}") from None
    if isinstance(loaded, torch.Tensor):
        return [loaded]
    if isinstance(loaded, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in loaded):
        return list(loaded)
    raise AttributionError(f"the baseline file {path} holds {type(loaded).__name__}, not tensors")


def model_output(out: Any) -> torch.Tensor:
    """The tensor of logits in what a model returned: a tensor, ``.logits`` (transformers'
    outputs), or the first tensor of a tuple/list/dict."""
    from gradviz.core.script.factory import first_tensor

    found = first_tensor(out)
    if found is not None:
        return found
    raise AttributionError(f"the model returned {type(out).__name__}, not a tensor of outputs: attribute "
                           "with --target loss, or return the logits")


@dataclass
class Objective:
    """The scalar ``f`` that is attributed. ``target``: 'loss', an output index, 'label' or 'pred'."""

    script: Any            # ModelScript
    target: str | int = "loss"
    pred: torch.Tensor | None = None   # 'pred': the classes chosen at the real input

    def describe(self) -> str:
        if self.target == "loss":
            return "loss"
        if self.target == "label":
            return "each example's label (output logit)"
        if self.target == "pred":
            return "each example's predicted class (output logit)"
        return f"output {self.target} (logit, summed over the batch)"

    def __call__(self, model: torch.nn.Module, inputs: tuple, targets: Any) -> torch.Tensor:
        if self.target == "loss":
            return self.script.check_loss(self.script.compute_loss(model, inputs, targets))
        try:
            out = model_output(model(*inputs))
        except AttributionError:
            raise
        except Exception as exc:
            from gradviz.core.script.load import definition_site, error_from_exception
            raise error_from_exception(exc, "the model's forward raised", "forward-error",
                                       definition_site(type(model).forward)) from None
        if not out.is_floating_point() or out.dim() == 0:
            raise AttributionError(f"the model output has shape {list(out.shape)} and dtype {out.dtype}: "
                                   "output targets need (batch, ..., classes) floating scores")
        if isinstance(self.target, int):
            n = out.shape[-1]
            if not -n <= self.target < n:
                raise AttributionError(f"--target {self.target} is out of range: the output has {n} units "
                                       f"(shape {list(out.shape)})")
            return out[..., self.target].sum()
        classes = self._classes(out, targets)
        keep = classes >= 0                      # ignore_index-style targets (-100) are skipped
        picked = out.gather(-1, classes.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return (picked * keep).sum()

    def _classes(self, out: torch.Tensor, targets: Any) -> torch.Tensor:
        if self.target == "pred":
            if self.pred is None:
                self.pred = out.detach().argmax(-1)
            return self.pred
        if not isinstance(targets, torch.Tensor) or targets.is_floating_point() \
                or list(targets.shape) != list(out.shape[:-1]):
            shape = list(targets.shape) if isinstance(targets, torch.Tensor) else type(targets).__name__
            raise AttributionError(f"--target label needs integer class targets shaped like the output "
                                   f"without its last axis ({list(out.shape[:-1])}), got {shape}")
        return targets


@dataclass
class EmbeddingCall:
    """One embedding lookup of an integer input, as seen on the real input."""

    input_index: int
    module: str            # '' when the call is F.embedding in user code
    output: torch.Tensor | None = None       # the (possibly interpolated) output of this pass
    real: torch.Tensor | None = None         # the output at the real ids (alpha = 1)
    base: torch.Tensor | None = None         # the baseline output (alpha = 0)


class EmbeddingPath(TorchFunctionMode):
    """Moves the outputs of embedding lookups of the integer inputs along the path.

    ``int_inputs``: {input index: ids tensor}; ``base_ids``: {input index: baseline ids}
    or missing for a zero baseline vector. Set ``alpha`` before each forward; ``calls``
    holds this forward's lookups in call order (the same order on every forward).
    """

    def __init__(self, int_inputs: dict[int, torch.Tensor], base_ids: dict[int, torch.Tensor],
                 weight_owner: dict[int, str] | None = None) -> None:
        super().__init__()
        self.int_inputs = int_inputs
        self.base_ids = base_ids
        self.alpha = 1.0
        self.calls: list[EmbeddingCall] = []
        self.seen: list[EmbeddingCall] = []      # the first forward's lookups (real and base outputs)
        self._weight_owner = weight_owner or {}      # id(embedding weight) -> module path
        self._ptrs = {_ptr(t): i for i, t in int_inputs.items()}

    def begin(self, alpha: float) -> None:
        self.alpha = alpha
        self.calls = []

    def _which(self, ids: Any) -> int | None:
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point():
            return None
        for i, t in self.int_inputs.items():
            if ids is t:
                return i
        i = self._ptrs.get(_ptr(ids))
        if i is not None and list(ids.shape) == list(self.int_inputs[i].shape):
            return i
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name not in EMBEDDING_CALLS or not args:
            return out
        i = self._which(args[0])
        if i is None or not isinstance(out, torch.Tensor):
            return out
        k = len(self.calls)
        if k >= len(self.seen):                  # first forward: learn the call and its baseline
            base = torch.zeros_like(out)
            if i in self.base_ids:
                base = func(self.base_ids[i], *args[1:], **kwargs).detach()
            module = self._weight_owner.get(id(args[1]), "") if len(args) > 1 else ""
            self.seen.append(EmbeddingCall(i, module, real=out.detach(), base=base))
        call = self.seen[k]
        moved = call.base + self.alpha * (out.detach() - call.base)
        moved.requires_grad_(True)
        self.calls.append(EmbeddingCall(i, call.module, output=moved, real=call.real, base=call.base))
        return moved


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):   # tensors without storage (meta, functional wrappers)
        return -1


@dataclass
class PathPoint:
    """One forward + backward at ``alpha``: the objective and its gradients."""

    value: float
    input_grads: dict[int, torch.Tensor] = field(default_factory=dict)
    embedding_grads: list[torch.Tensor] = field(default_factory=list)   # parallel to EmbeddingPath.calls
