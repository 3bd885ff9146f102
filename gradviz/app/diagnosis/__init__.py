"""Diagnosis panels of the window: ``install(window)`` per the extension contract.

Adds the Diagnosis panel (findings of ``gradviz.core.diagnosis.check``) and the
Gradcheck panel, and a "Health check" action in the Diagnose menu and the toolbar.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence

from gradviz.app.diagnosis.panels import DiagnosisPanel, GradcheckPanel
from gradviz.app.diagnosis.workers import stop_all

__all__ = ["install", "DiagnosisPanel", "GradcheckPanel"]


def install(window) -> dict:
    diag = DiagnosisPanel(window)
    grad = GradcheckPanel(window)
    window.diagnosis_panel = diag
    window.gradcheck_panel = grad
    diag_dock = window.add_dock("Diagnosis", diag, Qt.BottomDockWidgetArea)
    grad_dock = window.add_dock("Gradcheck", grad, Qt.BottomDockWidgetArea)

    health = QAction("Health check", window)
    health.setToolTip("Run the gradient checklist on the current script")
    health.setShortcut(QKeySequence("Ctrl+Shift+H"))

    def run_health():
        diag_dock.show()
        diag_dock.raise_()
        diag.run_check()

    health.triggered.connect(run_health)
    gc_action = QAction("Gradient check…", window)
    gc_action.setToolTip("Compare autograd with numerical gradients (float64, on a copy)")

    def show_gradcheck():
        grad_dock.show()
        grad_dock.raise_()

    gc_action.triggered.connect(show_gradcheck)
    window.add_action("Diagnose", health)
    window.add_action("Diagnose", gc_action)
    toolbar = getattr(window, "toolbar", None)
    if toolbar is not None:
        toolbar.addAction(health)

    def on_graph(graph):
        grad.set_graph(graph)
        script = graph.graph.get("script") if graph is not None else None
        if diag.report is not None and script and diag.report.get("script") == script:
            diag.mark_all()   # a re-trace of the same script: draw the marks again

    if hasattr(window, "graphChanged"):
        window.graphChanged.connect(on_graph)
    graph = getattr(getattr(window, "document", None), "graph", None)
    if graph is not None:
        grad.set_graph(graph)
    try:
        window.destroyed.connect(lambda *_: stop_all(5000))
    except Exception:
        pass
    return {"diagnosis": diag, "gradcheck": grad, "health_action": health, "gradcheck_action": gc_action}
