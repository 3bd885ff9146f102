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

``adaptive_clip_`` clips in place and returns each gradient's norm after clipping, as 0-d
tensors on the gradients' devices (no host sync), for the step's statistics.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from gradviz.core.script import ScriptError

__all__ = ["AdaptiveClip", "adaptive_clip_", "clip_after_adaptive", "GRANULARITIES"]

GRANULARITIES = ("parameter", "unit")
_TINY = 1e-6          # the floor of ||G|| in the scale (timm, NFNets): a zero gradient stays zero


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


def _unit_norms(t: torch.Tensor) -> torch.Tensor:
    """Norm per output unit (over every dimension but the first, kept for broadcasting)."""
    if t.dim() <= 1:
        return torch.linalg.vector_norm(t)
    return torch.linalg.vector_norm(t, dim=tuple(range(1, t.dim())), keepdim=True)


def adaptive_clip_(params: Sequence[torch.Tensor], factor: float, eps: float = 1e-3,
                   granularity: str = "parameter") -> list[torch.Tensor]:
    """Adaptive clipping of every ``p.grad`` present (see the module docstring), in place.

    Returns the L2 norm of each clipped gradient, in the order of the parameters that have
    one. A NaN/Inf gradient stays non-finite (its scale is NaN): the step's statistics count it.
    Sparse gradients are refused with a ``ScriptError`` (rows of a sparse gradient repeat and
    are summed later: their norm is not the gradient's).
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
    with torch.no_grad():
        if granularity == "parameter":
            g_norms = list(torch._foreach_norm(grads))
            w_norms = list(torch._foreach_norm([p.detach() for p in with_grad]))
            scales = [_scale(g, w, factor, eps) for g, w in zip(g_norms, w_norms)]
            torch._foreach_mul_(grads, [s.to(g.dtype) for s, g in zip(scales, grads)])
            return [g * s for g, s in zip(g_norms, scales)]
        out = []
        for p, g in zip(with_grad, grads):
            scale = _scale(_unit_norms(g), _unit_norms(p.detach()), factor, eps)
            g.mul_(scale.to(g.dtype))
            out.append(torch.linalg.vector_norm(g))
        return out


def _scale(g_norm: torch.Tensor, w_norm: torch.Tensor, factor: float, eps: float) -> torch.Tensor:
    """1 where ``||G|| < limit``, else ``limit / max(||G||, 1e-6)`` (float32 or wider)."""
    g_norm = g_norm.float() if g_norm.dtype in (torch.float16, torch.bfloat16) else g_norm
    limit = w_norm.to(g_norm.dtype).clamp(min=eps) * factor
    return torch.where(g_norm < limit, torch.ones_like(g_norm), limit / g_norm.clamp(min=_TINY))


def clip_after_adaptive(params: Sequence[torch.Tensor], norms: list[torch.Tensor],
                        max_norm: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``clip_grad_norm_``'s global clip of gradients already clipped adaptively, whose
    norms (``adaptive_clip_``'s result) are known: returns (the global norm it saw, each
    gradient's norm after it)."""
    from torch.nn.utils import clip_grads_with_norm_

    with torch.no_grad():
        device = norms[0].device
        total = torch.linalg.vector_norm(torch.stack([n.to(device, torch.float32) for n in norms]))
        clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, total, foreach=None)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        return total, [n * coef.to(n.device) for n in norms]
