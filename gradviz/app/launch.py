"""``run_app``: start the desktop app (``gradviz [script]``), or take a screenshot of it.

Screenshot mode (``--screenshot PATH``) sizes the window, waits until the graph is
traced, laid out and painted, saves a grab atomically and exits 0; on any error it
prints the reason on stderr and exits 1 (also after ``SCREENSHOT_TIMEOUT`` seconds).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import gradviz

log = logging.getLogger(__name__)

SCREENSHOT_TIMEOUT = 120.0


def default_script() -> Path | None:
    """The built-in sample, ``samples/mlp_digits.py`` (in the wheel, or the checkout; None if absent)."""
    from gradviz.resources import sample

    return sample("mlp_digits")


def parse_size(size: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise ValueError(f"--size must look like 1400x900, got {size!r}") from None
    if w < 200 or h < 150:
        raise ValueError(f"--size {size} is too small")
    return w, h


def make_app(argv: list[str] | None = None):
    from PySide6.QtWidgets import QApplication

    from gradviz.app.icon import app_icon

    app = QApplication.instance()
    if app is None:
        app = QApplication(argv or [sys.argv[0] if sys.argv else "gradviz"])
        app.setStyle("Fusion")
    app.setApplicationName("gradviz")
    app.setApplicationDisplayName("gradviz")
    app.setOrganizationName("gradviz")
    app.setOrganizationDomain("gradviz.dev")
    app.setApplicationVersion(gradviz.__version__)
    app.setWindowIcon(app_icon())
    if app.platformName() == "offscreen":
        quiet_offscreen_notices()
    return app


# what Qt's offscreen platform says each time a window is shown or resized: true, and of no use to a user
OFFSCREEN_NOTICES = frozenset({"This plugin does not support propagateSizeHints()"})


def quiet_offscreen_notices() -> None:
    """Drop the offscreen platform's notices (``--screenshot`` with no display printed eight); pass on the rest."""
    from PySide6.QtCore import qInstallMessageHandler

    def handler(mode, context, message: str) -> None:
        if message in OFFSCREEN_NOTICES:
            return
        if previous is not None:
            previous(mode, context, message)
        else:
            print(message, file=sys.stderr)

    previous = qInstallMessageHandler(handler)


def save_atomically(image, path: str | Path) -> None:
    from gradviz.core.runtime.atomic import atomic_write

    fmt = (Path(path).suffix[1:] or "png").upper()

    def write(tmp: str) -> None:
        if not image.save(tmp, fmt):
            raise OSError(f"could not write {fmt} image to {path}")
    atomic_write(path, write)


def run_app(script: str | None = None, screenshot: str | None = None, size: str = "1400x900",
            meta: bool | None = None, note: str | None = None, plan=None) -> int:
    """The window on ``script`` (default: the digits sample). ``meta``: True traces structure only (meta
    device), False never does, None only when the model would not fit in memory. ``note`` (what gradviz
    invented for a model without a script) is shown in the status bar once it is open."""
    try:
        width, height = parse_size(size)
    except ValueError as exc:
        print(f"gradviz: {exc}", file=sys.stderr)
        return 2
    app = make_app()
    from PySide6.QtCore import QTimer

    from gradviz.app.error_panel import ExceptHook
    from gradviz.app.main_window import MainWindow
    from gradviz.core.runtime.gc_pause import started

    started()      # torch, Qt and the window's modules are in: freeze them (the window then collects itself)
    window = MainWindow()
    window.session.meta = meta
    log_first_graph(window)
    hook = ExceptHook(window)
    hook.caught.connect(lambda exc, text: window.show_error(exc, details=text, title="Unexpected error"))
    hook.install()
    path = Path(script) if script else default_script()
    result = {"code": 0}
    if screenshot:
        window.resize(width, height)
        return _screenshot(app, window, path, screenshot, hook, note, plan)
    if not window.restore_layout():
        window.resize(width, height)
    window.show()
    if path is not None:
        QTimer.singleShot(0, lambda: window.open_script(path))
        if note:
            QTimer.singleShot(0, lambda: window.show_message(note, 30000))
    else:
        window.view.set_placeholder("The built-in sample (samples/mlp_digits.py) is not installed.\n"
                                    "Open a model script with File ▸ Open (Ctrl+O) or drop a .py file here.")
    try:
        result["code"] = app.exec()
    finally:
        hook.uninstall()
    if not window.shutdown(2000):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(result["code"])  # a user script still running in the worker: do not wait for it
    return result["code"]


def log_first_graph(window) -> None:
    """Log (``-v``) when the first graph is on screen, counted from the process's start."""
    from gradviz.core.runtime.launch_clock import seconds_since_launch

    def shown() -> None:
        window.graphShown.disconnect(shown)
        seconds = seconds_since_launch()
        if seconds is not None:     # CPU seconds too: on a busy machine they say more than the wall clock
            log.info("graph on screen %.2f s after launch (%.2f s CPU)", seconds, time.process_time())
    window.graphShown.connect(shown)


def _screenshot(app, window, path: Path | None, out: str, hook, note: str | None = None, plan=None) -> int:
    from PySide6.QtCore import QTimer

    from gradviz.app.screenshot_script import ScreenshotDriver, ScreenshotPlan

    state = {"code": 1, "done": False}

    def finish(code: int, message: str | None = None) -> None:
        if state["done"]:
            return
        state["done"] = True
        if message:
            print(f"gradviz: {message}", file=sys.stderr)
        state["code"] = code
        app.quit()

    def shoot() -> None:
        try:
            app.processEvents()
            with window.scene.finishing():   # a big graph's far picture whole, not its first bands
                window.repaint()
                image = window.grab().toImage()
            save_atomically(image, out)
        except Exception as exc:  # noqa: BLE001
            finish(1, f"screenshot failed: {exc}")
            return
        finish(0)

    def staged(error: str | None) -> None:
        if error:
            finish(1, error)
        else:
            QTimer.singleShot(150, shoot)

    def shown() -> None:
        window.graphShown.disconnect(shown)    # (a stage's re-grouping shows the graph again)

        def settle() -> None:  # docks have their final sizes now: fit again, then the plan's stages
            window.view.fit()
            window.minimap.refresh()
            state["driver"] = ScreenshotDriver(window, plan or ScreenshotPlan(), staged)
            state["driver"].start()
        QTimer.singleShot(150, settle)

    if path is None:
        print("gradviz: the built-in sample samples/mlp_digits.py is missing; give a script", file=sys.stderr)
        return 1
    window.graphShown.connect(shown)
    window.traceFailed.connect(lambda exc: finish(1, f"could not trace {path}: {exc}"))
    hook.caught.connect(lambda exc, text: finish(1, f"unexpected error: {exc}"))
    QTimer.singleShot(int(SCREENSHOT_TIMEOUT * 1000),
                      lambda: finish(1, f"timed out after {SCREENSHOT_TIMEOUT:.0f} s waiting for the graph"))
    window.show()
    QTimer.singleShot(0, lambda: window.open_script(path))
    if note:
        QTimer.singleShot(0, lambda: window.show_message(note, 30000))
    app.exec()
    hook.uninstall()
    if not window.shutdown(2000):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(state["code"])
    return state["code"]
