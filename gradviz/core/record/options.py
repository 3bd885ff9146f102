"""What ``watch`` accepts as options: whole numbers where it counts steps, a finite number of seconds.

A value that would silently record something else is a ``ValueError`` at the call: ``every=-1``
sampled every step, ``commit_seconds=inf`` never committed in time (and stopped the background
commits of every watch), ``update_ratio_every=0`` meant nothing.
"""
from __future__ import annotations

import math
import numbers

__all__ = ["check_options"]


def check_options(every, commit_every, commit_seconds, update_ratio_every) -> None:
    """ValueError for options that would silently record something else (a negative ``every``
    samples every step; an infinite ``commit_seconds`` never commits in time)."""
    def whole(value, name, least, none_ok):
        if value is None and none_ok:
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ValueError(f"watch({name}=...): expected a whole number >= {least}"
                             f"{' or None' if none_ok else ''}, got {value!r}")

    whole(every, "every", 0, True)
    whole(commit_every, "commit_every", 1, False)
    whole(update_ratio_every, "update_ratio_every", 1, True)
    if isinstance(commit_seconds, bool) or not isinstance(commit_seconds, numbers.Real) or \
            not math.isfinite(commit_seconds) or commit_seconds < 0:
        raise ValueError(f"watch(commit_seconds=...): expected a finite number of seconds >= 0, got "
                         f"{commit_seconds!r}")
