"""File things the window does: the Open dialog, dropped files, export and copy of the graph
image (with a status-bar confirmation naming the file), and About."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox

import gradviz
from gradviz.app.export_dialog import WHOLE_GRAPH, ask_and_export, export_view
from gradviz.app.formatting import count
from gradviz.app.graph_view import GraphView
from gradviz.app.session import Session
from gradviz.render.export.formats import ImageOptions
from gradviz.render.export.image_export import ExportResult, copy_to_clipboard

log = logging.getLogger(__name__)


def dropped_file(mime, suffixes: tuple[str, ...]) -> str | None:
    """The first local file among dropped urls whose name ends with one of ``suffixes``."""
    for url in mime.urls() if mime.hasUrls() else []:
        if url.isLocalFile() and url.toLocalFile().lower().endswith(suffixes):
            return url.toLocalFile()
    return None


class FileActions:
    def __init__(self, window: QMainWindow, session: Session, view: GraphView,
                 open_path: Callable[[str], None], suffixes: Callable[[], tuple[str, ...]]) -> None:
        self.window = window
        self.session = session
        self.view = view
        self._open = open_path
        self._suffixes = suffixes       # the file kinds the window opens (scripts, run files...)

    def open_dialog(self) -> None:
        doc = self.session.document
        start = str(doc.path.parent) if doc.path else str(Path.cwd())
        path, _ = QFileDialog.getOpenFileName(self.window, "Open model script", start,
                                              "Model scripts (*.py);;All files (*)")
        if path:
            self._open(path)

    def drag_enter(self, event) -> None:
        if dropped_file(event.mimeData(), self._suffixes()):
            event.acceptProposedAction()

    def drop(self, event) -> None:
        path = dropped_file(event.mimeData(), self._suffixes())
        if path:
            event.acceptProposedAction()
            self._open(path)

    def export_dialog(self) -> ExportResult | None:
        doc = self.session.document
        if doc.view is None:
            QMessageBox.information(self.window, "Export graph", "There is no graph to export yet.")
            return None
        stem = doc.path.stem if doc.path else "graph"
        result = ask_and_export(self.window, self.view, str(Path.cwd() / f"{stem}.png"))
        if result is not None:
            self.confirm(result)
        return result

    def export_to(self, path: str | Path, scale: float = 2.0, dpi: int = 144, what: str = WHOLE_GRAPH) -> Path:
        """Export the scene as shown, without dialogs (raises on failure); ``what`` is 'whole graph'
        or 'current view'."""
        result = export_view(self.view, path, what, ImageOptions(scale=scale, dpi=dpi))
        self.confirm(result)
        return result.path

    def confirm(self, result: ExportResult) -> None:
        """The status bar names the file written (and what the user should know about it)."""
        note = f" — {result.note}" if result.note else ""
        self.window.statusBar().showMessage(f"Graph saved to {result.path}{note}", 15000)

    def copy_image(self) -> None:
        copy_to_clipboard(self.view.scene())
        self.window.statusBar().showMessage("Graph image copied to the clipboard", 3000)

    def about(self) -> None:
        doc = self.session.document
        run = doc.run
        QMessageBox.about(
            self.window, "About gradviz",
            f"<h3>gradviz {gradviz.__version__}</h3><p>See and debug backpropagation in PyTorch.</p>"
            f"<p>Script: {doc.path or '—'}<br>Device: {run.get('device') or '—'}<br>"
            f"Nodes: {count(run.get('nodes'))} · edges: {count(run.get('edges'))}</p>")
