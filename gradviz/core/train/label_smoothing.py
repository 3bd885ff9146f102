"""Label smoothing of a script's cross-entropy loss, without editing the script.

With smoothing ``epsilon`` over ``C`` classes the target distribution becomes
``(1 - epsilon) * one_hot(y) + epsilon / C`` and the gradient at the logits
``softmax(x) - target`` (seed 002, section 2.3): the model is pushed to give every class some
probability, and the gradient norm drops (about 18 % at epsilon = 0.1 in the seed's test).
torch computes it in ``F.cross_entropy(..., label_smoothing=epsilon)``; ``LabelSmoothing`` is a
``TorchFunctionMode`` (a public mechanism) that sets that argument on every
``F.cross_entropy`` call made while it is active -- ``nn.CrossEntropyLoss`` and transformers'
losses go through it -- so the loss is torch's own, weights, ``ignore_index``, reductions and
probability targets included. A script's own ``label_smoothing`` is replaced (logged once).

Losses that do not call ``F.cross_entropy`` (``nll_loss`` after ``log_softmax``, BCE, a
hand-written softmax) are not changed: ``calls`` stays 0 and the trainer reports that, rather
than training without the smoothing it was asked for.

The graph of a smoothed cross-entropy with class-index targets has more nodes than the
script's (torch adds the smoothing term beside ``nll_loss``): ``id_roots`` gives the nodes
whose subgraph is exactly the graph a trace of the script has, so sampled node norms keep the
trace's node ids (``NodeNormSampler.sample(id_roots=...)``).
"""
from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

log = logging.getLogger(__name__)

__all__ = ["LabelSmoothing", "id_roots", "warn_no_node_norms"]

_POSITION = 7          # label_smoothing's place in F.cross_entropy(input, target, weight, size_average,
                       # ignore_index, reduce, reduction, label_smoothing)
_SEARCH_LIMIT = 16     # nodes searched for nll_loss below a smoothed cross-entropy's output
_warned_replace = False
_warned_no_node_norms = False


class LabelSmoothing(TorchFunctionMode):
    """Sets ``label_smoothing=epsilon`` on every ``F.cross_entropy`` call while active.

    ``calls``: how many cross-entropy calls were smoothed; ``outputs``: for each, the output
    tensor's ``grad_fn`` and whether the targets were class indices (for ``id_roots``).
    """

    def __init__(self, epsilon: float) -> None:
        super().__init__()
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"label smoothing must be in [0, 1], got {epsilon}")
        self.epsilon = float(epsilon)
        self.calls = 0
        self.outputs: list[tuple[Any, bool]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.cross_entropy:
            return func(*args, **kwargs)
        args, kwargs = self._smoothed(args, dict(kwargs))
        out = func(*args, **kwargs)
        self.calls += 1
        target = args[1] if len(args) > 1 else kwargs.get("target")
        index_targets = not (isinstance(target, torch.Tensor) and target.is_floating_point())
        if isinstance(out, torch.Tensor) and out.grad_fn is not None:
            self.outputs.append((out.grad_fn, index_targets))
        return out

    def _smoothed(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        global _warned_replace
        if len(args) > _POSITION:
            given = args[_POSITION]
            args = args[:_POSITION] + (self.epsilon,) + args[_POSITION + 1:]
        else:
            given = kwargs.get("label_smoothing", 0.0)
            kwargs["label_smoothing"] = self.epsilon
        if given and float(given) != self.epsilon and not _warned_replace:
            _warned_replace = True
            log.warning("the script's cross-entropy has label_smoothing=%s; the trainer's %s replaces it",
                        given, self.epsilon)
        return args, kwargs


def id_roots(loss: torch.Tensor, smoothing: LabelSmoothing) -> list | None:
    """The autograd nodes to number the graph of ``loss`` from, so its ids are a trace's.

    ``[loss.grad_fn]`` when smoothing left the graph's structure as the script's (probability
    targets: only the constant targets change); ``[nll node]`` when ``loss`` is a smoothed
    cross-entropy of class indices (its ``nll_loss`` node has exactly the script's subgraph);
    None when no numbering matches the trace (a smoothed class-index cross-entropy inside a
    larger loss): the caller then measures no node norms for the step.
    """
    root = loss.grad_fn
    smoothed_index = [fn for fn, index in smoothing.outputs if index]
    if not smoothed_index:
        return [root]
    if smoothed_index != [root]:
        return None
    nll = _find_nll(root)
    return None if nll is None else [nll]


def _find_nll(root: Any) -> Any:
    """The first ``NllLoss*Backward`` node below ``root`` (breadth first, a few nodes deep)."""
    queue, seen = [root], set()
    while queue and len(seen) < _SEARCH_LIMIT:
        fn = queue.pop(0)
        if fn in seen:
            continue
        seen.add(fn)
        if fn.name().startswith("NllLoss"):
            return fn
        queue.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return None


def warn_no_node_norms() -> None:
    """Says once why a sampled step has no node norms (``id_roots`` found no numbering)."""
    global _warned_no_node_norms
    if not _warned_no_node_norms:
        _warned_no_node_norms = True
        log.warning("label smoothing: the loss adds a smoothed class-index cross-entropy to other terms, so its "
                    "graph has no numbering matching the trace's; node norms are not sampled")
