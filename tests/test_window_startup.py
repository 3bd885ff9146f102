"""#16: what stands between launch and the first graph. The window's hidden panels (Training plots,
the Run dock's curves, the inspector's histogram) make their pyqtgraph plots when first needed, and
they work the same once they are."""
import os
import subprocess
import sys

from test_app_support import MLP, ROOT

STARTUP = """
import sys
from gradviz.app.launch import make_app
app = make_app()
from gradviz.app.main_window import MainWindow
from PySide6.QtCore import QEventLoop, QTimer
window = MainWindow()
window.resize(1200, 800)
window.show()
loop = QEventLoop()
window.graphShown.connect(loop.quit)
QTimer.singleShot(60000, loop.quit)
window.open_script({script!r})
loop.exec()
assert window.document.graph is not None, "no graph"
assert "pyqtgraph" not in sys.modules, "pyqtgraph loaded before the first graph"
panel = window.training_panel
assert not panel.plots_slot.made()
plots_dock = next(d for d in window.docks.docks if d.windowTitle() == "Training plots")
plots_dock.show()
app.processEvents()
assert panel.plots_slot.made() and panel.plots.isVisible(), "the shown dock has no plots"
assert panel.plots.parentWidget() is plots_dock.widget()
run_dock = next(d for d in window.docks.docks if window.run_panel.isAncestorOf(d.widget()) or d.widget() is window.run_panel)
run_dock.show()
app.processEvents()
assert len(window.run_panel.curves.plots) == 3, "the Run dock shown without its plots"
window.shutdown(5000)
print("ok")
"""


def test_pyqtgraph_waits_until_a_panel_that_plots_is_shown(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", STARTUP.format(script=str(MLP))], capture_output=True, text=True,
                         env=env, timeout=180, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_training_started_makes_the_plots_and_fills_them(qtbot, window):
    from test_app_support import open_and_wait

    from gradviz.app.training import install

    panel = window.training_panel = install(window)
    open_and_wait(qtbot, window, MLP)
    assert not panel.plots_slot.made()
    window.select_nodes(["param:fc1.weight"])          # selecting before the plots exist: nothing to highlight
    panel.step()
    qtbot.waitUntil(lambda: len(panel.history) == 1 and "fc1.weight" in panel.plots.param_curves, timeout=60000)
    panel.plots.refresh(force=True)
    assert panel.plots.points() == len(panel.history) == 1, (panel.plots.points(), len(panel.history))
    window.select_nodes([])
    window.select_nodes(["param:fc1.weight"])        # now the plots exist: the parameter's curves stand out
    qtbot.waitUntil(lambda: panel.plots.highlighted == "fc1.weight", timeout=10000)
