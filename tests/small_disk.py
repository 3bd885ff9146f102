"""A real small disk for the tests of full disks: a tmpfs of a few hundred KB, mounted for one test.

Mounting needs root (CI and this project's machines run as root). Where it is not allowed the
test that asked is skipped, saying so; the same faults are also tested everywhere through
SQLite's own limit (``PRAGMA max_page_count``: the database cannot grow, SQLITE_FULL), so no
machine runs without a full-disk test.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(where: Path, kb: int):
    """A tmpfs of ``kb`` KB mounted at ``where`` (created), unmounted after the block."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the max_page_count tests cover full disks here)")
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(where)], capture_output=True,
                         text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({got.stderr.strip()}); the max_page_count tests cover full disks")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> None:
    """Fill the disk of ``folder`` to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:                           # ENOSPC: full
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def read_only_view(folder: Path, where: Path):
    """``folder`` seen read-only at ``where`` (a read-only bind mount, like a read-only share)."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    got = subprocess.run(["mount", "--bind", str(folder), str(where)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot bind-mount here ({got.stderr.strip()})")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(where)], check=True, capture_output=True)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
