"""Where gradviz keeps what it makes for itself: ``$GRADVIZ_CACHE``, by default ``~/.cache/gradviz``.

Generated model scripts (``models/``), the native accelerator's builds (``native/``) and the registry of
temporary files being written (``temporaries/``) live there. ``cache_folder(name)`` is that sub-folder,
made when missing, or a ``CacheError`` that says in one line why it cannot be (``GRADVIZ_CACHE=/dev/null``,
a read-only folder, a file in the way).
"""
from __future__ import annotations

import os
from pathlib import Path

from gradviz.core.runtime.errors import GradvizError
from gradviz.core.runtime.messages import short_path

__all__ = ["CacheError", "cache_root", "cache_folder"]


class CacheError(GradvizError):
    """The cache folder cannot be made or written."""


def cache_root() -> Path:
    base = os.environ.get("GRADVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gradviz")
    return Path(base)


def cache_folder(name: str) -> Path:
    """``$GRADVIZ_CACHE/<name>``, made (with its parents) when missing and checked writable."""
    folder = cache_root() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheError(_why(folder, exc)) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CacheError(_why(folder, PermissionError(13, "Permission denied (not writable)")))
    return folder


def _why(folder: Path, exc: OSError) -> str:
    source = "GRADVIZ_CACHE" if os.environ.get("GRADVIZ_CACHE") else "the default cache (~/.cache/gradviz)"
    return (f"gradviz cannot use its cache folder {short_path(folder)} ({source}): {exc.strerror or exc}; set "
            "GRADVIZ_CACHE to a folder you can write")
