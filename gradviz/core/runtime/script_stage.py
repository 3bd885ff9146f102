"""What of the user's code gradviz is calling right now, for a process that watches from outside.

When the user's script ends the process itself (``os._exit(7)``, a segfault in a C extension, the
out-of-memory killer), nothing inside the process can report it. The command line's supervisor
(``cli/supervisor.py``) can, if it knows where gradviz was: ``entering("loss_fn", "e.py:12")`` is
called by ``core/script/load.call_user`` before each call into the script and hands the text to the
sink the supervisor installed (shared memory: no system call); without a sink it does nothing.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["set_sink", "entering"]

_sink: Callable[[str], None] | None = None


def set_sink(sink: Callable[[str], None] | None) -> None:
    global _sink
    _sink = sink


def entering(what: str, site: tuple[str, int] | None = None) -> None:
    if _sink is not None:
        _sink(f"{what} (defined at {site[0]}:{site[1]})" if site else what)
