"""Paths from the user, checked before anything opens them: a length the system takes, a regular file.

Opening a FIFO for reading blocks until a writer comes (forever, for ``gradviz check pipe.py``); a
character device (``/dev/zero``) never ends; a socket cannot be opened at all. ``require_regular_file``
says which one a path is before gradviz opens it, and ``open_regular`` opens without blocking and checks
the opened file itself (no window between the check and the open). ``check_length`` refuses a path the
system would refuse with ``ENAMETOOLONG``, in words, before it reaches a library that would raise it
from deep inside.
"""
from __future__ import annotations

import os
import stat
from typing import BinaryIO

from gradviz.core.runtime.errors import GradvizError
from gradviz.core.runtime.messages import short_path

__all__ = ["PathError", "check_length", "require_regular_file", "open_regular", "read_regular", "is_regular",
           "kind_of"]


class PathError(GradvizError):
    """A path that cannot be used as asked (too long, not a regular file)."""


def _limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (OSError, ValueError, AttributeError):
        return default


NAME_MAX = _limit("PC_NAME_MAX", 255)
PATH_MAX = _limit("PC_PATH_MAX", 4096)


def check_length(path: str | os.PathLike, what: str = "path") -> None:
    """A PathError when ``path`` (made absolute) or one of its names is longer than the system allows."""
    raw = os.fsencode(os.path.abspath(os.path.expanduser(os.fspath(path))))
    if len(raw) >= PATH_MAX:
        raise PathError(f"{what} {short_path(path)} is {len(raw):,} bytes long; paths here stop at {PATH_MAX - 1:,}")
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        raise PathError(f"{what} {short_path(path)} has a name of {len(longest):,} bytes; names here stop at "
                        f"{NAME_MAX}")


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def require_regular_file(path: str | os.PathLike, what: str = "file") -> None:
    """A PathError unless ``path`` is a regular file (after symbolic links); FileNotFoundError if missing."""
    check_length(path, what)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise PathError(f"{what} {short_path(path)} is {kind_of(mode)}, not a regular file: gradviz reads "
                        "only regular files (it would wait forever on a pipe or a device)")


def open_regular(path: str | os.PathLike, what: str = "file") -> BinaryIO:
    """``path`` opened for reading in binary, once it is known to be a regular file.

    Opened with ``O_NONBLOCK`` (a FIFO then opens at once instead of waiting for a writer), checked with
    ``fstat`` on the descriptor itself, then switched back to blocking reads.
    """
    check_length(path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(os.fspath(path), flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise PathError(f"{what} {short_path(path)} is {kind_of(mode)}, not a regular file: gradviz reads "
                            "only regular files (it would wait forever on a pipe or a device)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, what: str = "file") -> bytes:
    with open_regular(path, what) as f:
        return f.read()


def is_regular(path: str | os.PathLike) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
