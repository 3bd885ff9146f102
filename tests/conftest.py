import os
import sys
from pathlib import Path

import pytest

# GUI tests run with no screen; set before any Qt import.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def window(qtbot, tmp_path):
    import gradviz.app  # noqa: F401  (PySide6 workaround first)
    from PySide6.QtCore import QSettings

    from gradviz.app.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    win = MainWindow(settings=settings, extensions=False)
    qtbot.addWidget(win)
    win.resize(1300, 850)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.shutdown()
