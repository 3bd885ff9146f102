import os
import sys
from pathlib import Path

import pytest

# GUI tests run with no screen; set before any Qt import.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The Python paths by default, and no background builds of the native accelerator; the tests
# that take the native path ask for it (the `accel` / `native_module` fixtures).
os.environ.setdefault("GRADVIZ_NATIVE", "0")

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


@pytest.fixture(scope="session")
def native_module():
    """The native accelerator, built into the cache if needed (~20 s once per torch/Python)."""
    from gradviz.core import native

    if not native.compiler_available():
        pytest.skip("no C++ compiler and ninja here: the native accelerator cannot be built")
    return native.ensure()


@pytest.fixture(params=["python", "native"])
def accel(request):
    """Run the test on the Python paths and again on the native accelerator."""
    from gradviz.core import native

    module = request.getfixturevalue("native_module") if request.param == "native" else None
    with native.forced(module):
        yield request.param
