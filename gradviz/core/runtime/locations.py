"""Which code a stack frame belongs to, and where an op was made: the user's line and the library's.

Deliberately free of torch imports (torch's folder is found without importing it): the CLI's
guard classifies frames from signal handlers, which may fire while torch is half imported.

A frame is one of: ``user`` (the user's own code), ``library`` (an installed package other
than torch: transformers, torchvision...), ``torch``, ``gradviz``, ``stdlib``, ``launcher``
(the ``gradviz`` console script that started the process) or ``internal`` (``<string>``...).

For an op seen during forward, ``locate(frame)`` walks from the innermost frame outward and
returns the innermost ``user`` frame and the innermost ``library`` frame. It stops at the
first gradviz frame met after leaving gradviz: everything outside that is gradviz's own call
stack and its launcher (``bin/gradviz``'s ``sys.exit(main())``, ``python -m gradviz``'s
runpy), never a location of the user's model.
"""
from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import sysconfig
import traceback
from types import FrameType, TracebackType
from typing import NamedTuple

__all__ = ["is_user_file", "user_frame_of", "frame_kind", "locate", "Location", "GRADVIZ_DIR", "TORCH_DIR",
           "STDLIB_DIR"]


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)   # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) if locations else None


GRADVIZ_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))   # gradviz/core/runtime -> gradviz
TORCH_DIR = _package_dir("torch")
STDLIB_DIR = os.path.dirname(os.__file__)
_TORCH_DIR = (TORCH_DIR + os.sep) if TORCH_DIR else "\0"
_GRADVIZ_DIR = GRADVIZ_DIR + os.sep
_STDLIB_DIRS = tuple({os.path.abspath(p) + os.sep for p in (STDLIB_DIR, sysconfig.get_paths().get("stdlib", ""),
                                                             sysconfig.get_paths().get("platstdlib", "")) if p})
_PACKAGE_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)

_cache: dict[str, str] = {}


class Location(NamedTuple):
    user: str          # 'file:line' of the innermost user frame, '' when none
    code: str          # that line of code
    library: str       # 'file:line' of the innermost library frame, '' when none


def _launchers() -> set[str]:
    """The console script that runs ``gradviz.cli.main`` as ``__main__`` (pip's ``bin/gradviz``)."""
    main = sys.modules.get("__main__")
    entry = getattr(main, "main", None)
    if getattr(entry, "__module__", "") == "gradviz.cli.main" and getattr(main, "__file__", None):
        return {os.path.abspath(main.__file__)}
    return set()


def frame_kind(filename: str) -> str:
    kind = _cache.get(filename)
    if kind is None:
        kind = _cache[filename] = _classify(filename)
    return kind


def _classify(filename: str) -> str:
    if not filename or filename.startswith("<"):
        return "internal"
    path = os.path.abspath(filename)
    if path.startswith(_TORCH_DIR):
        return "torch"
    if path.startswith(_GRADVIZ_DIR):
        return "gradviz"
    if any(m in path for m in _PACKAGE_MARKERS):
        return "library"
    if path.startswith(_STDLIB_DIRS):
        return "stdlib"
    if path in _launchers():
        return "launcher"
    return "user"


def is_user_file(filename: str) -> bool:
    """True for code the user wrote: not torch, gradviz, a library, the standard library or the launcher."""
    return frame_kind(filename) == "user"


def _where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def locate(frame: FrameType | None) -> Location:
    """The innermost user and library frames from ``frame`` outward, within the user's call."""
    user = code = library = ""
    left_gradviz = False
    while frame is not None and not (user and library):
        kind = frame_kind(frame.f_code.co_filename)
        if kind == "gradviz":
            if left_gradviz:
                break                      # gradviz called the user's code from here: the rest is ours
        else:
            left_gradviz = True
            if kind == "user" and not user:
                user = _where(frame)
                code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            elif kind == "library" and not library:
                library = _where(frame)
        frame = frame.f_back
    return Location(user, code, library)


def user_frame_of(tb: TracebackType | None) -> tuple[str, int] | None:
    """The innermost traceback frame that lies in user code."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        if is_user_file(frame.f_code.co_filename):
            found = (frame.f_code.co_filename, lineno)
    return found
