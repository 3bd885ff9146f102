"""Whose code a frame is: the user's, or torch's, gradviz's, a library's, the standard library's.

Deliberately free of torch imports (torch's folder is found without importing it): the CLI's
guard classifies frames from signal handlers, which may fire while torch is half imported.
"""
from __future__ import annotations

import importlib.util
import os
import traceback
from types import TracebackType

__all__ = ["is_user_file", "user_frame_of", "GRADVIZ_DIR", "TORCH_DIR", "STDLIB_DIR"]


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)   # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) if locations else None


GRADVIZ_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_DIR = _package_dir("torch")
STDLIB_DIR = os.path.dirname(os.__file__)
_NOT_USER = tuple(d + os.sep for d in (GRADVIZ_DIR, TORCH_DIR, STDLIB_DIR) if d)


def is_user_file(filename: str) -> bool:
    """True for code the user wrote: not torch, not gradviz, not the standard library, not site-packages."""
    if not filename or filename.startswith("<"):
        return False
    filename = os.path.abspath(filename)
    return not filename.startswith(_NOT_USER) and "site-packages" not in filename


def user_frame_of(tb: TracebackType | None) -> tuple[str, int] | None:
    """The innermost traceback frame that lies in user code."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        if is_user_file(frame.f_code.co_filename):
            found = (frame.f_code.co_filename, lineno)
    return found
