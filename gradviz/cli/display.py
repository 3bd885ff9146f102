"""Can the window open here? Decided before Qt loads, because Qt's own answer is an abort.

Without a usable display Qt prints a misleading hint ("xcb-cursor0 is needed") and aborts
the process (exit 134). gradviz checks first, without importing Qt:

- on Linux with neither ``DISPLAY`` nor ``WAYLAND_DISPLAY`` there is no display: the window
  cannot open (one line saying so and what works instead); ``--screenshot`` draws offscreen;
- with ``DISPLAY`` (X11, Qt's ``xcb`` plugin) the system libraries that plugin needs must
  load, and the X server must answer; otherwise one line names the missing libraries and the
  Debian/Ubuntu packages that provide them (README lists them all), or the display that
  does not answer. ``--screenshot`` then also falls back to offscreen.

``QT_QPA_PLATFORM`` set by the user is respected as it is.
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Callable

log = logging.getLogger(__name__)

__all__ = ["XCB_LIBRARIES", "missing_libraries", "display_problem", "prepare_display"]

# What Qt 6's xcb platform plugin (libqxcb.so, libQt6XcbQpa.so.6) and QtGui load, by soname, with the
# Debian/Ubuntu package that provides each. Found on Debian 12 with `objdump -p` and `dpkg -S`;
# tests/test_display.py checks the table against the installed plugin's DT_NEEDED entries.
XCB_LIBRARIES = {
    "libxcb.so.1": "libxcb1", "libX11.so.6": "libx11-6", "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0", "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0", "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0", "libxcb-sync.so.1": "libxcb-sync1", "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0", "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1", "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6", "libglib-2.0.so.0": "libglib2.0-0", "libgthread-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
}


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(loads: Callable[[str], bool] = _loads) -> list[str]:
    """The sonames of ``XCB_LIBRARIES`` the dynamic loader cannot find here."""
    return [soname for soname in XCB_LIBRARIES if not loads(soname)]


def _x_server_answers(display: str) -> bool:
    """Connect to the X server with libxcb (as Qt would) and hang up; False if it does not answer."""
    xcb = ctypes.CDLL("libxcb.so.1")
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    connection = xcb.xcb_connect(display.encode(), None)
    try:
        return connection is not None and xcb.xcb_connection_has_error(connection) == 0
    finally:
        if connection is not None:
            xcb.xcb_disconnect(connection)


def display_problem(environ: dict[str, str] | None = None, loads: Callable[[str], bool] = _loads,
                    answers: Callable[[str], bool] = _x_server_answers) -> str | None:
    """Why the window cannot open here (one sentence), or None when it can (or Qt is told otherwise)."""
    env = os.environ if environ is None else environ
    if env.get("QT_QPA_PLATFORM") or not sys.platform.startswith("linux"):
        return None
    display, wayland = env.get("DISPLAY"), env.get("WAYLAND_DISPLAY")
    if not display and not wayland:
        return "there is no display here (neither DISPLAY nor WAYLAND_DISPLAY is set)"
    if not display:
        return None   # Wayland only: Qt's wayland plugin
    missing = missing_libraries(loads)
    if missing:
        packages = " ".join(dict.fromkeys(XCB_LIBRARIES[s] for s in missing))
        return (f"Qt's X11 plugin cannot load: {', '.join(missing)} not found. On Debian/Ubuntu: "
                f"sudo apt-get install {packages} (the README lists every library Qt needs)")
    if not answers(display):
        return f"the X display {display!r} (DISPLAY) does not answer"
    return None


def prepare_display(screenshot: bool) -> str | None:
    """Make Qt start where it can: None to go on, else the one-line reason the window cannot open.

    For ``--screenshot`` a missing or unusable display is no obstacle: Qt draws offscreen.
    """
    problem = display_problem()
    if problem is None:
        return None
    if screenshot:
        log.info("%s; drawing the screenshot offscreen", problem)
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        return None
    return (f"cannot open the window: {problem}. Without a display: gradviz --screenshot out.png (drawn "
            "offscreen), or the headless commands (gradviz export|check|gradcheck|train ...).")
