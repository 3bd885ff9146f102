"""Diagnosis panels of the window: ``install(host)`` (see ``app/extensions.py``).

Adds the Diagnosis panel (findings of ``gradviz.core.diagnosis.check``) and the
Gradcheck panel, and "Health check" / "Gradient check…" in the Diagnose menu and the
toolbar. Both run as jobs of the window's ``Jobs`` helper, bound to the document.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence

from gradviz.app.contract import PanelHost
from gradviz.app.diagnosis.findings_panel import DiagnosisPanel
from gradviz.app.diagnosis.gradcheck_panel import GradcheckPanel

__all__ = ["install", "DiagnosisPanel", "GradcheckPanel"]


def install(host: PanelHost) -> dict:
    diag = DiagnosisPanel(host)
    grad = GradcheckPanel(host)
    diag_dock = host.add_dock("Diagnosis", diag, Qt.BottomDockWidgetArea)
    grad_dock = host.add_dock("Gradcheck", grad, Qt.BottomDockWidgetArea)
    diag_dock.hide()       # until asked for: the graph keeps the window's height
    grad_dock.hide()

    health = QAction("Health check", diag_dock)
    health.setToolTip("Run the gradient checklist on the current script")
    health.setShortcut(QKeySequence("Ctrl+Shift+H"))

    def run_health() -> None:
        diag_dock.show()
        diag_dock.raise_()
        diag.run_check()

    health.triggered.connect(run_health)
    gc_action = QAction("Gradient check…", grad_dock)
    gc_action.setToolTip("Compare autograd with numerical gradients (float64, on a copy)")

    def show_gradcheck() -> None:
        grad_dock.show()
        grad_dock.raise_()

    gc_action.triggered.connect(show_gradcheck)
    def findings_arrived(doc, what: str, _info: dict) -> None:
        # what opening found (a NaN/inf loss explained): shown without being asked for
        if what == "findings" and doc.status == "ready" and doc.findings and doc.findings.get("findings"):
            if diag.job is None or not diag.job.active:
                diag_dock.show()
                diag_dock.raise_()

    host.documentEdited.connect(findings_arrived)
    host.add_action("Diagnose", health, toolbar=True)
    host.add_action("Diagnose", gc_action)
    return {"diagnosis": diag, "gradcheck": grad, "health_action": health, "gradcheck_action": gc_action,
            "diagnosis_dock": diag_dock, "gradcheck_dock": grad_dock}
