"""The errors gradviz raises on purpose: ``GradvizError``, the base, and ``ScriptError``, the user's script.

A ``GradvizError`` is a problem gradviz can explain (a script that breaks the contract, a
file that cannot be written, a run file that cannot be read): the CLI prints its message
and exits 2, the window shows it in its error panel. Anything else that escapes is a bug
in gradviz and is reported as one.
"""
from __future__ import annotations

__all__ = ["GradvizError", "ScriptError"]


class GradvizError(Exception):
    """An error gradviz can explain to the user in one message."""


class ScriptError(GradvizError):
    """The user's script cannot be used. ``location`` is ``file:line`` when known.

    ``code`` says what went wrong: ``script-error`` (cannot load / breaks the
    contract), ``forward-error``, ``backward-error``, ``loss-not-tensor`` or
    ``loss-not-scalar``. ``details`` holds the formatted traceback, if any.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 code: str = "script-error", details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.code = code
        self.details = details

    def with_hint(self, hint: str) -> ScriptError:
        """The same error with ``hint`` (what to check) appended to its message."""
        self.message = f"{self.message} ({hint})"
        self.args = (self.message,)
        return self

    @property
    def location(self) -> str | None:
        if self.path is None:
            return None
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        return f"{self.location}: {self.message}" if self.location else self.message
