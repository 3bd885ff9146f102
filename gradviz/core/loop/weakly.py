"""A callable that reaches a method through a weak reference: what the loop doctor hands to torch's
global hooks and to ``warnings.showwarning``, so a watch dropped without ``close()`` takes its doctor
with it instead of leaving hooks that watch every later optimizer."""
from __future__ import annotations

import weakref
from typing import Any, Callable


def weakly(owner: Any, method: str, fallback: Callable | None = None) -> Callable:
    """``owner.method`` through a weak reference (``fallback``, or nothing, once the owner is gone)."""
    ref = weakref.ref(owner)

    def call(*args: Any, **kwargs: Any) -> Any:
        target = ref()
        if target is not None:
            return getattr(target, method)(*args, **kwargs)
        if fallback is not None:
            return fallback(*args, **kwargs)
        return None
    return call
