"""The two refusals of a file gradviz reads a model or weights from: broken, or unsafe.

``FileRefused`` (a ``ScriptError``: exit 2, one line) says the file cannot be read as what it claims to
be (not a zip, truncated, broken JSON, a schema this torch does not read); ``UnsafeFile`` says it holds
something that would run code if it were loaded the way torch loads it (a pickle naming ``eval``, Python
in a symbolic expression, a shared library): nothing of it was run. Both name the archive ``member``.
"""
from __future__ import annotations

import struct
import zipfile
import zlib

from gradviz.core.runtime.errors import ScriptError

__all__ = ["FileRefused", "UnsafeFile", "ARCHIVE_ERRORS"]

# what ``zipfile`` raises on a malformed archive (found by tests/test_fuzz_files.py: a flipped byte in a
# name is a UnicodeDecodeError, in a compression field a NotImplementedError, in an extra field a struct.error)
ARCHIVE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
                  RuntimeError, struct.error, zlib.error, KeyError, IndexError, OverflowError)


class FileRefused(ScriptError):
    def __init__(self, message: str, member: str | None = None, *, path: str | None = None) -> None:
        super().__init__(message, path=path)
        self.member = member


class UnsafeFile(FileRefused):
    """Refused: loading it would run what the file says. Nothing was run."""
