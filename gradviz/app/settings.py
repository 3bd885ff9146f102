"""Where the window keeps its settings (geometry, dock layout, recent files).

A window on a real screen uses the user's settings. Offscreen and minimal platforms (the
test suite, ``gradviz --screenshot``, CI) get a throwaway settings file instead, so they
never write the user's geometry or recent files. A saved geometry that is tiny or off
every screen is not restored: the window opens at its default size instead.
"""
from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from pathlib import Path

from PySide6.QtCore import QRect, QSettings
from PySide6.QtGui import QGuiApplication

log = logging.getLogger(__name__)

HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc")
MIN_WIDTH, MIN_HEIGHT = 720, 480          # a saved window smaller than this is not the user's
MIN_VISIBLE = 0.5                         # ...nor one mostly off every screen (see usable_geometry)
MIN_GRAPH_FRACTION = 0.35                 # the graph keeps at least this much of the width


def headless() -> bool:
    return QGuiApplication.platformName() in HEADLESS_PLATFORMS


def window_settings() -> QSettings:
    """The user's settings on a real screen; a throwaway file (removed at exit) when headless."""
    if not headless():
        return QSettings()
    folder = Path(tempfile.mkdtemp(prefix="gradviz-settings-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    log.debug("headless platform %s: settings in %s", QGuiApplication.platformName(), folder)
    return QSettings(str(folder / "settings.ini"), QSettings.IniFormat)


def usable_geometry(rect: QRect) -> bool:
    """Whether a restored window frame is one a person left: big enough, and covering at least
    half of itself or half of a screen (a window larger than its screen still counts)."""
    if rect.width() < MIN_WIDTH or rect.height() < MIN_HEIGHT:
        return False
    area = rect.width() * rect.height()
    for screen in QGuiApplication.screens():
        avail = screen.availableGeometry()
        visible = avail.intersected(rect)
        if visible.width() * visible.height() >= MIN_VISIBLE * min(area, avail.width() * avail.height()):
            return True
    return False
