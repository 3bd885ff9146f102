"""Qt start-up helper: a usable QApplication anywhere (image export on a server, CI).

(The ctypes refcount workaround for PySide6 6.12.0 on Python 3.11 is gone: that release
is excluded by ``pyproject.toml``'s ``PySide6-Essentials!=6.12.0``.)
"""
from __future__ import annotations

import os
import sys


def ensure_app():
    """The running QApplication (or QGuiApplication), creating an offscreen one if needed.

    With no display (no $DISPLAY / $WAYLAND_DISPLAY on Linux) and no platform chosen, Qt
    would abort; we pick the ``offscreen`` platform so export works on servers and in CI.
    """
    if (sys.platform.startswith("linux") and not os.environ.get("DISPLAY")
            and not os.environ.get("WAYLAND_DISPLAY") and not os.environ.get("QT_QPA_PLATFORM")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        app = QApplication(["gradviz"])
    return app
