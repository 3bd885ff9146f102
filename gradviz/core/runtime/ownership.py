"""Which process does gradviz's work: a fork in the user's script never duplicates it.

A command that runs a user's script claims the process (``claim``). If the script calls ``os.fork()``
(at import, in ``batch``...), both processes come back into gradviz; the copy must not trace, train or
print a second time. ``leave_if_forked`` is called wherever control returns from the user's code
(``core/script/load.py``): in a copy it ends that process at once, as the script's own code would have
ended there (the exit status of a ``SystemExit``, 1 after printing the traceback of any other exception,
else 0), so the work is done once, by the process that was claimed. Forks that never come back into
gradviz (multiprocessing workers, a DataLoader's) are not affected. ``at_fork`` callbacks run in every
copy right after the fork (the command line closes its output there).
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

__all__ = ["claim", "release", "is_copy", "leave_if_forked", "at_fork"]

_owner: int | None = None
_callbacks: list[Callable[[], None]] = []


def claim() -> None:
    global _owner
    _owner = os.getpid()


def release() -> None:
    global _owner
    _owner = None


def is_copy() -> bool:
    """This process is a fork of the one that claimed gradviz's work."""
    return _owner is not None and os.getpid() != _owner


def leave_if_forked(exc: BaseException | None = None) -> None:
    """In a fork of the claimed process: end it now (see the module docstring); else nothing."""
    if not is_copy():
        return
    status = 0
    if isinstance(exc, SystemExit):
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    elif exc is not None:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass        # a closed or replaced stream: the copy ends anyway
    os._exit(status)


def at_fork(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` in the child of every fork while a process is claimed; returns its remover."""
    _callbacks.append(callback)
    return lambda: _callbacks.remove(callback) if callback in _callbacks else None


def _after_fork_in_child() -> None:
    if _owner is None:
        return
    for callback in list(_callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001 - a child must never fail inside the fork itself
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
