"""#12 item 7: settings belong to the user's real window. Offscreen runs (tests, --screenshot)
never write the user's settings; a saved geometry that is tiny or off every screen is not
restored (the window opens at its default size)."""
from __future__ import annotations

import tempfile

from PySide6.QtCore import QSettings


def test_offscreen_windows_get_throwaway_settings(qtbot, tmp_path):
    from gradviz.app.main_window import MainWindow

    user = QSettings()                                  # what a real window would use
    win = MainWindow(extensions=False)
    qtbot.addWidget(win)
    try:
        assert win.settings.fileName() != user.fileName()
        assert win.settings.fileName().startswith(tempfile.gettempdir())
        script = tmp_path / "broken.py"
        script.write_text("x = 1\n")
        win.recent.add(script)                          # a test's temporary script...
        win.save_layout()
        assert str(script) not in (user.value("recentFiles") or [])     # ...never in the user's list
        assert QSettings().value("window/geometry") == user.value("window/geometry")
    finally:
        win.shutdown()


def _saved(tmp_path, geometry):
    from gradviz.app.main_window import MainWindow

    ini = str(tmp_path / "s.ini")
    first = MainWindow(settings=QSettings(ini, QSettings.IniFormat), extensions=False)
    first.setGeometry(*geometry)
    first.save_layout()
    first.shutdown()
    return MainWindow(settings=QSettings(ini, QSettings.IniFormat), extensions=False)


def test_a_tiny_or_offscreen_geometry_is_not_restored(qtbot, tmp_path):
    from PySide6.QtGui import QGuiApplication

    screen = QGuiApplication.primaryScreen().availableGeometry()
    tiny = _saved(tmp_path, (screen.x() + 10, screen.y() + 10, 666, 300))
    qtbot.addWidget(tiny)
    assert not tiny.restore_layout()
    tiny.shutdown()
    away = _saved(tmp_path, (screen.right() + 3000, screen.bottom() + 3000, 1200, 800))
    qtbot.addWidget(away)
    # a window saved off every screen (a monitor since unplugged) comes back onto one
    if away.restore_layout():
        seen = screen.intersected(away.frameGeometry())
        assert seen.width() * seen.height() >= 0.5 * min(screen.width() * screen.height(), 1200 * 800)
    away.shutdown()
    good = _saved(tmp_path, (screen.x(), screen.y(), max(720, screen.width() - 20), max(480, screen.height() - 20)))
    qtbot.addWidget(good)
    assert good.restore_layout()
    good.shutdown()


def test_a_narrow_window_leaves_the_graph_its_room(qtbot, window):
    """Side panels shrink with the window: the graph keeps at least a third of the width."""
    from gradviz.app.settings import MIN_GRAPH_FRACTION

    window.resize(900, 600)
    window.docks.apply_default_sizes()
    qtbot.wait(50)
    assert window.view.width() >= MIN_GRAPH_FRACTION * window.width()
