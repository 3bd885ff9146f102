"""Qt start-up helpers: a usable QApplication anywhere, and a PySide6 refcount workaround.

PySide6/shiboken 6.12.0 returns ``None`` from void methods (and ``True`` from
``Signal.emit``) without taking a reference. From Python 3.12 these objects are
immortal and nothing happens; on 3.11 each call decrements their refcount and after
roughly 5,000 Qt calls CPython aborts with "none_dealloc: deallocating None". We give
the three singletons a huge refcount once (2**40 calls' worth), which is what
immortality means in 3.12+. Harmless elsewhere; skipped where it cannot apply.
"""
from __future__ import annotations

import ctypes
import os
import sys

_done = False


BROKEN_SHIBOKEN = ("6.12.0",)  # releases known to leak references to None/True


def protect_singletons() -> None:
    """Make None/True/False effectively immortal on CPython < 3.12 with a broken
    shiboken (idempotent). pyproject excludes those releases; this keeps an
    environment that has one anyway from crashing."""
    global _done
    if _done or sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        _done = True
        return
    try:
        from importlib.metadata import version

        if version("shiboken6") not in BROKEN_SHIBOKEN:
            _done = True
            return
    except Exception:
        pass  # unknown install: apply the workaround, it is harmless
    if hasattr(sys, "getobjects") or getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return  # debug / free-threaded builds lay out objects differently
    for obj in (None, True, False):
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 40  # ob_refcnt is the first field
    _done = True


def ensure_app():
    """The running QApplication (or QGuiApplication), creating an offscreen one if needed.

    With no display (no $DISPLAY / $WAYLAND_DISPLAY on Linux) and no platform chosen, Qt
    would abort; we pick the ``offscreen`` platform so export works on servers and in CI.
    """
    protect_singletons()
    if (sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
            and not os.environ.get("WAYLAND_DISPLAY") and not os.environ.get("QT_QPA_PLATFORM")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        app = QApplication(["gradviz"])
    return app
