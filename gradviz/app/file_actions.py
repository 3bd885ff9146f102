"""File things the window does: the Open dialog, dropped .py files, export and copy of
the graph image, About, and the window title."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

import gradviz
from gradviz.app.export_dialog import ask_and_export, export_view
from gradviz.core.record.schema import EXTENSION as RUN_EXTENSION
from gradviz.render.formats import ImageOptions
from gradviz.render.image_export import copy_to_clipboard
from gradviz.app.formatting import count


def dropped_script(mime) -> str | None:
    """The first local model script (``.py``) or run file (``.gvrun``) among dropped urls."""
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile() and url.toLocalFile().endswith((".py", RUN_EXTENSION)):
            return url.toLocalFile()
    return None


class FileActions:
    def __init__(self, window) -> None:
        self.window = window
        self.document = window.document

    def open_dialog(self) -> None:
        doc = self.document
        start = str(doc.path.parent) if doc.path else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self.window, "Open model script", start,
                                              "Model scripts (*.py);;All files (*)")
        if path:
            self.window.open_script(path)

    def drag_enter(self, event) -> None:
        if dropped_script(event.mimeData()):
            event.acceptProposedAction()

    def drop(self, event) -> None:
        path = dropped_script(event.mimeData())
        if path:
            event.acceptProposedAction()
            self.window.open_script(path)

    def export_dialog(self) -> None:
        doc = self.document
        if doc.view is None:
            QMessageBox.information(self.window, "Export graph", "There is no graph to export yet.")
            return
        stem = doc.graph_path.stem if doc.graph_path else "graph"
        ask_and_export(self.window, self.window.view, str(Path.cwd() / f"{stem}.png"))

    def export_to(self, path: str | Path, scale: float = 2.0, dpi: int = 144, what: str = "whole graph") -> Path:
        """Export the scene as shown, without dialogs (raises on failure)."""
        return export_view(self.window.view, path, what, ImageOptions(scale=scale, dpi=dpi)).path

    def copy_image(self) -> None:
        win = self.window
        copy_to_clipboard(win.scene)
        win.statusBar().showMessage("graph image copied", 3000)

    def about(self) -> None:
        doc = self.document
        run = doc.run
        QMessageBox.about(
            self.window, "About gradviz",
            f"<h3>gradviz {gradviz.__version__}</h3><p>See and debug backpropagation in PyTorch.</p>"
            f"<p>Script: {doc.graph_path or '—'}<br>Device: {run.get('device') or '—'}<br>"
            f"Nodes: {count(run.get('nodes'))} · edges: {count(run.get('edges'))}</p>")

    def update_title(self) -> None:
        name = self.document.path.name if self.document.path else None
        self.window.setWindowTitle(f"gradviz — {name}" if name else "gradviz")
