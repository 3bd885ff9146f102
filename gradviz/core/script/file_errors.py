"""The two refusals of a file gradviz reads a model or weights from: broken, or unsafe.

``FileRefused`` (a ``ScriptError``: exit 2, one line) says the file cannot be read as what it claims to
be (not a zip, truncated, broken JSON, a schema this torch does not read); ``UnsafeFile`` says it holds
something that would run code if it were loaded the way torch loads it (a pickle naming ``eval``, Python
in a symbolic expression, a shared library): nothing of it was run. Both name the archive ``member``.
"""
from __future__ import annotations

from gradviz.core.runtime.errors import ScriptError

__all__ = ["FileRefused", "UnsafeFile"]


class FileRefused(ScriptError):
    def __init__(self, message: str, member: str | None = None, *, path: str | None = None) -> None:
        super().__init__(message, path=path)
        self.member = member


class UnsafeFile(FileRefused):
    """Refused: loading it would run what the file says. Nothing was run."""
