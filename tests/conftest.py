import os
import sys
import tempfile
from pathlib import Path

import pytest

# GUI tests run with no screen; set before any Qt import.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The Python paths by default; the tests that take the native path ask for it (the `accel` /
# `native_module` fixtures). Builds go into the tests' own cache under the system's temporary
# folder (kept between runs: a build takes ~30 s), never into the user's ~/.cache/gradviz.
os.environ.setdefault("GRADVIZ_NATIVE", "0")
os.environ.setdefault("GRADVIZ_CACHE", os.path.join(tempfile.gettempdir(), f"gradviz-test-cache-{os.getuid()}"))

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def line_of(path: Path, marker: str) -> int:
    """The 1-based number of the first line of ``path`` containing ``marker`` (tests name lines by content)."""
    for i, text in enumerate(path.read_text().splitlines(), start=1):
        if marker in text:
            return i
    raise AssertionError(marker)


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
