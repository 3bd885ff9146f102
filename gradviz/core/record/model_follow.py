"""Parameters replaced, added or removed under a running ``watch`` (``ParamFollower``).

``model.fc = nn.Linear(...)`` mid-run leaves the watch's parameter list pointing at tensors
the model no longer uses. torch calls its global registration hooks
(``register_module_parameter_registration_hook`` / ``..._module_registration_hook``, public
since torch 2.0) whenever any module registers a parameter or a submodule; the follower keeps
the ones that concern the watched module's tree and raises ``changed``. The watch then compares
the module's parameters with its own (``diff``) before it next reads gradients, and follows
the new ones from that step on. No per-step cost: nothing is compared until a hook fired.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.modules.module import (register_module_module_registration_hook,
                                     register_module_parameter_registration_hook)

from gradviz.core.stats.tied_grads import split_ties

__all__ = ["ParamFollower", "ParamChange", "union_order"]


@dataclass
class ParamChange:
    step: int
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.replaced)

    def to_dict(self) -> dict:
        return {"step": self.step, "added": self.added, "removed": self.removed, "replaced": self.replaced}

    def text(self) -> str:
        parts = [f"{what} {', '.join(names[:6])}{' (+%d more)' % (len(names) - 6) if len(names) > 6 else ''}"
                 for what, names in (("replaced", self.replaced), ("added", self.added), ("removed", self.removed))
                 if names]
        return "; ".join(parts)


class ParamFollower:
    """Raises ``changed`` when a module of ``module``'s tree registers a parameter or submodule."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.changed = False
        self._tree: weakref.WeakSet = weakref.WeakSet(module.modules())
        me = weakref.ref(self)

        def registered(owner, name, value):             # torch's hook: returns None (keeps the value)
            follower = me()
            if follower is not None and owner in follower._tree:
                follower.changed = True

        self._handles = [register_module_parameter_registration_hook(registered),
                         register_module_module_registration_hook(registered)]

    def diff(self, step: int, names: list[str], params: list[torch.Tensor]) -> tuple[ParamChange, list]:
        """What changed against the watch's ``names``/``params``, and the module's trainable
        parameters now (resets ``changed`` and the tree the hooks look at)."""
        self.changed = False
        self._tree = weakref.WeakSet(self.module.modules())
        now = [(n, p) for n, p in self.module.named_parameters() if p.requires_grad]
        old = dict(zip(names, params))
        new = dict(now)
        change = ParamChange(step, added=[n for n in new if n not in old], removed=[n for n in old if n not in new],
                             replaced=[n for n in new if n in old and new[n] is not old[n]])
        return change, now

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def union_order(known: list[str], now: list[tuple[str, torch.Tensor]]) -> tuple[list[str], list[tuple]]:
    """(every name ever recorded, in column order: new names appended; ``now`` in that order). A name
    over another parameter's bytes (``tied_grads``) is no column: it comes last, for ``StepStats`` to fold."""
    kept, tied = split_ties(now)
    union = list(known) + [n for n, _ in kept if n not in known]
    where = {n: i for i, n in enumerate(union)}
    return union, sorted(kept, key=lambda pair: where[pair[0]]) + [pair for i in sorted(tied) for pair in tied[i]]
