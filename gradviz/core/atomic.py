"""Write a file so that readers see the old version or the new one, never half of one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from gradviz.core.errors import GradvizError


class ExportError(GradvizError):
    """A file cannot be written where or how it was asked (the message says why)."""


def atomic_write(path: str | os.PathLike, writer: Callable[[str], Any]) -> Path:
    """Call ``writer(tmp_path)`` on a temporary file next to ``path``, then rename it over ``path``.

    The rename (``os.replace``) is atomic on one file system, so readers see the old file or
    the new one, never half of one; on any error the temporary file is removed and an
    existing ``path`` is left as it was. The result gets normal permissions (umask),
    or the old file's, not mkstemp's 0600.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ExportError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=f".part{target.suffix}", dir=folder)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from exc
    os.close(fd)
    try:
        writer(tmp)
        if not os.path.exists(tmp):
            raise ExportError(f"cannot write {target}: the writer produced no file")
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target
