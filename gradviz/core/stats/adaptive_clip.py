"""Per-layer adaptive gradient clipping (AGC): each gradient bounded by a fraction of its weights.

Global clipping (``clip_grad_norm_``) scales every gradient by one factor, so one layer with a
huge gradient (an embedding) shrinks the updates of all the others. Adaptive clipping
(Brock et al. 2021, "High-Performance Large-Scale Image Recognition Without Normalization",
the NFNets paper; timm's ``adaptive_clip_grad``) bounds each parameter's gradient by its own
weights instead::

    limit = factor * max(||W||, eps)
    G <- G                           if ||G|| < limit
    G <- G * limit / max(||G||, 1e-6)  otherwise

i.e. the ratio ``||G|| / max(||W||, eps)`` is clipped at ``factor`` (lambda). ``eps`` keeps
freshly zero-initialised parameters (biases) from being frozen: their limit is
``factor * eps``. Granularity: ``"parameter"`` (the whole tensor, one ratio per layer's weight
or bias) or ``"unit"`` (the paper's unit-wise ratio: one per output unit, i.e. per row of a
weight, the norm taken over every dimension but the first; 0-d/1-d tensors as a whole).

``adaptive_clip_`` clips in place and returns each gradient's norm after clipping, for the
step's statistics: host floats for CPU float tensors (numpy on views, the cost of a few
BLAS dots), 0-d tensors on the gradients' device otherwise (no host sync).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.nn.utils import clip_grads_with_norm_

from gradviz.core.runtime.errors import ScriptError

__all__ = ["AdaptiveClip", "adaptive_clip_", "clip_after_adaptive", "GRANULARITIES"]

GRANULARITIES = ("parameter", "unit")
_TINY = 1e-6          # the floor of ||G|| in the scale (timm, NFNets): a zero gradient stays zero
_HOST_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class AdaptiveClip:
    """The settings of adaptive clipping: ``factor`` (lambda), ``eps``, ``granularity``."""

    factor: float
    eps: float = 1e-3
    granularity: str = "parameter"

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ValueError(f"adaptive clipping factor must be > 0, got {self.factor}")
        if not self.eps >= 0:
            raise ValueError(f"adaptive clipping eps must be >= 0, got {self.eps}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"adaptive clipping granularity must be one of {', '.join(GRANULARITIES)}, "
                               f"got {self.granularity!r}")

    def apply(self, params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Clip the gradients of ``params`` in place; see ``adaptive_clip_``."""
        return adaptive_clip_(params, self.factor, self.eps, self.granularity)


def adaptive_clip_(params: Sequence[torch.Tensor], factor: float, eps: float = 1e-3,
                   granularity: str = "parameter") -> list:
    """Adaptive clipping of every ``p.grad`` present (see the module docstring), in place.

    Returns the L2 norm of each clipped gradient, in the order of the parameters that have
    one: Python floats (CPU float tensors, reduced by numpy on views: a few microseconds a
    parameter) or 0-d tensors (any other device or dtype: ``torch._foreach_norm`` and one
    scale vector, no host sync). A NaN/Inf gradient stays non-finite (its scale is NaN): the
    step's statistics count it. Sparse gradients are refused with a ``ScriptError`` (rows of
    a sparse gradient repeat and are summed later: their norm is not the gradient's).
    """
    with_grad = [p for p in params if p.grad is not None]
    if not with_grad:
        return []
    grads = [p.grad for p in with_grad]
    if any(g.layout != torch.strided for g in grads):
        names = ", ".join(f"#{i}" for i, g in enumerate(grads) if g.layout != torch.strided)
        raise ScriptError(f"adaptive clipping needs dense gradients; parameter(s) {names} have sparse ones "
                          "(e.g. nn.Embedding(sparse=True)): turn adaptive clipping off or use dense gradients",
                          code="adaptive-clip-sparse")
    unitwise = granularity == "unit"
    with torch.no_grad():
        weights = [p.detach() for p in with_grad]
        if all(_host_viewable(g, w) for g, w in zip(grads, weights)):
            return [_clip_host(g.numpy(), w.numpy(), factor, eps, unitwise) for g, w in zip(grads, weights)]
        if not unitwise and len({g.device for g in grads}) == 1:
            return _clip_per_tensor(grads, weights, factor, eps)
        return [_clip_units(g, w, factor, eps) for g, w in zip(grads, weights)]


def _host_viewable(g: torch.Tensor, w: torch.Tensor) -> bool:
    """A CPU float32/float64 gradient and weight numpy can view (and scale in place) as laid out."""
    return (g.dtype in _HOST_DTYPES and g.is_cpu and w.is_cpu and g.is_contiguous() and w.is_contiguous()
            and not g.requires_grad)


def _clip_host(g: np.ndarray, w: np.ndarray, factor: float, eps: float, unitwise: bool) -> float:
    """One gradient clipped on its numpy view; returns its norm after clipping.

    Per parameter it is two BLAS dots and Python floats (numpy's 0-d operations cost
    microseconds each, as much as the rest of the step's statistics); NaN propagates as in
    torch: ``max(nan, x)`` is nan, ``x < nan`` is False, so a NaN norm gives a NaN scale."""
    if unitwise and g.ndim > 1:
        return _clip_host_rows(g.reshape(g.shape[0], -1), w.reshape(w.shape[0], -1), factor, eps)
    g_norm = math.sqrt(float(np.vdot(g, g)))
    limit = factor * max(math.sqrt(float(np.vdot(w, w))), eps)
    if g_norm < limit:
        return g_norm
    scale = limit / max(g_norm, _TINY)
    g *= g.dtype.type(scale)
    return g_norm * scale


def _clip_host_rows(g: np.ndarray, w: np.ndarray, factor: float, eps: float) -> float:
    """Unit-wise: one ratio per row of the (units, rest) views."""
    g_norm = np.sqrt(np.einsum("ij,ij->i", g, g).astype(np.float64))
    limit = factor * np.maximum(np.sqrt(np.einsum("ij,ij->i", w, w).astype(np.float64)), eps)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = np.where(g_norm < limit, 1.0, limit / np.maximum(g_norm, _TINY))
        if (scale != 1.0).any():
            g *= scale.astype(g.dtype)[:, None]
        post = g_norm * scale
        return math.sqrt(float(np.dot(post, post)))


def _clip_per_tensor(grads: list[torch.Tensor], weights: list[torch.Tensor], factor: float,
                     eps: float) -> list[torch.Tensor]:
    """Per-parameter clipping on one device: two ``_foreach_norm``, one scale vector, one multiply."""
    g_norm = torch.stack([n.float() for n in torch._foreach_norm(grads)])
    w_norm = torch.stack([n.float() for n in torch._foreach_norm(weights)])
    scale = _scale(g_norm, w_norm, factor, eps)
    torch._foreach_mul_(grads, list(scale.unbind()))
    return list((g_norm * scale).unbind())


def _clip_units(g: torch.Tensor, w: torch.Tensor, factor: float, eps: float) -> torch.Tensor:
    """One gradient clipped per output unit (rows; 0-d/1-d tensors as a whole) by torch."""
    dims = tuple(range(1, g.dim()))
    g_norm = torch.linalg.vector_norm(g, dim=dims, keepdim=True, dtype=torch.float32)
    w_norm = torch.linalg.vector_norm(w, dim=dims, keepdim=True, dtype=torch.float32)
    scale = _scale(g_norm, w_norm, factor, eps)
    g.mul_(scale.to(g.dtype))
    return torch.linalg.vector_norm(g_norm * scale)


def _scale(g_norm: torch.Tensor, w_norm: torch.Tensor, factor: float, eps: float) -> torch.Tensor:
    """1 where ``||G|| < limit``, else ``limit / max(||G||, 1e-6)``."""
    limit = w_norm.clamp(min=eps) * factor
    return torch.where(g_norm < limit, torch.ones_like(g_norm), limit / g_norm.clamp(min=_TINY))


def clip_after_adaptive(params: Sequence[torch.Tensor], norms: list,
                        max_norm: float) -> tuple[torch.Tensor, list]:
    """``clip_grad_norm_``'s global clip of gradients already clipped adaptively, whose
    norms (``adaptive_clip_``'s result: floats or 0-d tensors) are known: returns (the global
    norm it saw, as a tensor; each gradient's norm after it, of the kind given)."""
    with torch.no_grad():
        if isinstance(norms[0], torch.Tensor):
            device = norms[0].device
            total = torch.linalg.vector_norm(torch.stack([n.to(device, torch.float32) for n in norms]))
        else:
            total = torch.tensor(math.sqrt(math.fsum(n * n for n in norms)), dtype=torch.float32)
        clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, total, foreach=None)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        if isinstance(norms[0], torch.Tensor):
            return total, [n * coef.to(n.device) for n in norms]
        c = float(coef)
        return total, [n * c for n in norms]
