"""Write files so that readers see the old version or the new one, never half of one.

Each file is written to a hidden temporary name in the target's folder and renamed over
the target when complete. On any error, Ctrl-C included, the temporaries are removed.
A process killed outright (SIGKILL, SIGTERM, power loss) cannot clean up: so every temporary is
registered, while it exists, in ``$GRADVIZ_CACHE/temporaries/`` (its path, device and inode, and
the writer's process id), and the next write into that folder removes those whose writer no longer
runs. A file is removed only when the registry names it *and* it is still the same file (device and
inode): a user's own file is never deleted, whatever its name (``.notes.99999-abcdef12.part``).
"""
from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from gradviz.core.runtime.cache import cache_folder
from gradviz.core.runtime.errors import GradvizError

log = logging.getLogger(__name__)

__all__ = ["ExportError", "atomic_write", "AtomicFiles", "sweep_stale_parts"]

REGISTRY = "temporaries"


class ExportError(GradvizError):
    """A file cannot be written where or how it was asked (the message says why)."""


def _folder(target: Path) -> Path:
    return target.parent if str(target.parent) else Path(".")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except OSError:
        return True  # cannot tell (e.g. no os.kill semantics): keep the file
    return True


def _registry() -> Path | None:
    try:
        return cache_folder(REGISTRY)
    except GradvizError:
        log.debug("no registry of temporaries (the cache cannot be written): a killed writer's are left",
                  exc_info=True)
        return None


def _register(tmp: str) -> Path | None:
    """Record ``tmp`` (its identity and this process) in the registry; the record's path, or None."""
    registry = _registry()
    if registry is None:
        return None
    st = os.stat(tmp)
    record = registry / f"{os.getpid()}-{secrets.token_hex(8)}.json"
    try:
        record.write_text(json.dumps({"path": os.path.abspath(tmp), "dev": st.st_dev, "ino": st.st_ino,
                                      "pid": os.getpid()}))
    except OSError:
        log.debug("cannot register temporary %s", tmp, exc_info=True)
        return None
    return record


def _unregister(record: Path | None) -> None:
    if record is not None:
        try:
            record.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            log.debug("cannot remove the record %s", record, exc_info=True)


def sweep_stale_parts(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporaries in ``folder`` that the registry says a killed writer left; returns them."""
    registry = _registry()
    if registry is None:
        return []
    here = os.path.realpath(folder)
    removed = []
    for record in registry.glob("*.json"):
        try:
            entry = json.loads(record.read_text())
            path, pid = entry["path"], int(entry["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue      # being written, or not ours to judge
        if _pid_alive(pid):
            continue
        if os.path.realpath(os.path.dirname(path)) != here:
            continue
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            _unregister(record)       # renamed or removed before its writer died
            continue
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (entry.get("dev"), entry.get("ino")):
            try:
                os.unlink(path)
                removed.append(Path(path))
            except OSError:
                log.debug("cannot remove stale temporary %s", path, exc_info=True)
                continue
        _unregister(record)           # the file there now is not the one registered: never touched
    if removed:
        log.info("removed %d temporary file(s) left by a killed export in %s", len(removed), folder)
    return removed


def _mode_for(target: Path) -> int:
    """The old file's permissions, else the normal ones (umask), not mkstemp's 0600."""
    try:
        return os.stat(target).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class AtomicFiles:
    """Several files that appear together or not at all (e.g. PNG tiles and their overview).

    ``with AtomicFiles() as files: tmp = files.temp_for(path); ...write tmp...``: on a clean
    exit every temporary is renamed over its target; on any exception all are removed.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[str, Path]] = []
        self._records: dict[str, Path | None] = {}
        self._swept: set[Path] = set()

    def temp_for(self, path: str | os.PathLike) -> str:
        target = Path(path)
        folder = _folder(target)
        if not folder.is_dir():
            raise ExportError(f"cannot write {target}: folder {folder} does not exist")
        if folder not in self._swept:
            self._swept.add(folder)
            sweep_stale_parts(folder)
        tmp = str(folder / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.part")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError as exc:
            raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from exc
        os.close(fd)
        self._pending.append((tmp, target))
        self._records[tmp] = _register(tmp)
        return tmp

    def commit(self) -> list[Path]:
        for tmp, target in self._pending:
            if not os.path.exists(tmp):
                raise ExportError(f"cannot write {target}: the writer produced no file")
        done = []
        for tmp, target in self._pending:
            os.chmod(tmp, _mode_for(target))
            os.replace(tmp, target)
            _unregister(self._records.pop(tmp, None))
            done.append(target)
        self._pending = []
        return done

    def discard(self) -> None:
        for tmp, _ in self._pending:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            except OSError:
                log.warning("cannot remove temporary file %s", tmp, exc_info=True)
                continue     # still there: the record lets a later write remove it
            _unregister(self._records.pop(tmp, None))
        self._pending = []

    def __enter__(self) -> "AtomicFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            except BaseException:
                self.discard()
                raise
        else:
            self.discard()


def atomic_write(path: str | os.PathLike, writer: Callable[[str], Any]) -> Path:
    """Call ``writer(tmp_path)`` on a temporary file next to ``path``, then rename it over ``path``.

    The rename (``os.replace``) is atomic on one file system, so readers see the old file or
    the new one, never half of one; on any error (Ctrl-C included) the temporary file is
    removed and an existing ``path`` is left as it was.
    """
    target = Path(path)
    with AtomicFiles() as files:
        writer(files.temp_for(target))
    return target
