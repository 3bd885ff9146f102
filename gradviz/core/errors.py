"""The one base class of every error gradviz raises on purpose.

A ``GradvizError`` is a problem gradviz can explain (a script that breaks the contract, a
file that cannot be written, a run file that cannot be read): the CLI prints its message
and exits 2, the window shows it in its error panel. Anything else that escapes is a bug
in gradviz and is reported as one.
"""
from __future__ import annotations

__all__ = ["GradvizError"]


class GradvizError(Exception):
    """An error gradviz can explain to the user in one message."""
