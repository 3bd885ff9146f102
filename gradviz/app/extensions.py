"""Panels written as extensions: each module exposes ``install(window)``.

A module that does not exist (yet) is skipped; an ImportError from *inside* an
extension (a missing dependency, a typo) is not hidden: it is reported.
"""
from __future__ import annotations

import importlib
import traceback

EXTENSIONS = [
    "gradviz.app.training",
    "gradviz.app.diagnosis",
    "gradviz.app.runs",
]


def _missing_itself(exc: ModuleNotFoundError, name: str) -> bool:
    return exc.name == name or (exc.name is not None and name.startswith(exc.name + "."))


def load_extensions(window, names: list[str] | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Import each extension and call its ``install(window)``.

    Returns (installed names, [(name, traceback text)] of the ones that failed).
    """
    installed, failed = [], []
    for name in EXTENSIONS if names is None else names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if _missing_itself(exc, name):
                continue
            failed.append((name, traceback.format_exc()))
            continue
        except Exception:  # noqa: BLE001 - a broken extension must not take the window down
            failed.append((name, traceback.format_exc()))
            continue
        install = getattr(module, "install", None)
        if install is None:
            failed.append((name, f"{name} has no install(window) function"))
            continue
        try:
            install(window)
        except Exception:  # noqa: BLE001
            failed.append((name, traceback.format_exc()))
            continue
        installed.append(name)
    return installed, failed
