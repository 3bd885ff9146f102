"""File ▸ Export graph…: PNG (with scale and DPI), SVG or PDF of the whole graph, with
its legend, through ``gradviz.render.image_export``. Files are written atomically
(a temporary file in the same folder, then renamed); a failure says why."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QMessageBox,
                               QWidget)

FILTERS = {"PNG image (*.png)": ".png", "SVG vector image (*.svg)": ".svg", "PDF document (*.pdf)": ".pdf"}
SCALES = [1.0, 2.0, 3.0, 4.0]
DPIS = [72, 96, 150, 300]


def export_graph(graph, layout, path: str | Path, scale: float = 2.0, dpi: int = 144) -> Path:
    """Write the drawing of ``graph``/``layout`` to ``path`` (format from the suffix), atomically."""
    from gradviz.render.image_export import render_image

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".svg", ".pdf"):
        raise ValueError(f"unsupported format {path.suffix!r}: use .png, .svg or .pdf")
    if graph is None or layout is None:
        raise ValueError("there is no graph to export yet")
    render_image(graph, layout, path, scale=scale, dpi=dpi)  # writes a temporary file, then renames it
    return path


class PngOptions(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("PNG export")
        self.scale = QComboBox()
        for s in SCALES:
            self.scale.addItem(f"{s:g}×", s)
        self.scale.setCurrentIndex(1)
        self.dpi = QComboBox()
        for d in DPIS:
            self.dpi.addItem(f"{d} dpi", d)
        self.dpi.setCurrentIndex(2)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout(self)
        form.addRow("Scale", self.scale)
        form.addRow("Resolution", self.dpi)
        form.addRow(buttons)

    def values(self) -> tuple[float, int]:
        return float(self.scale.currentData()), int(self.dpi.currentData())


def ask_and_export(parent: QWidget, graph, layout, suggested: str) -> Path | None:
    """The interactive path: file dialog, PNG options, export, message box on failure."""
    path, chosen = QFileDialog.getSaveFileName(parent, "Export graph", suggested, ";;".join(FILTERS))
    if not path:
        return None
    p = Path(path)
    if p.suffix.lower() not in (".png", ".svg", ".pdf"):
        p = p.with_suffix(FILTERS.get(chosen, ".png"))
    scale, dpi = 1.0, 96
    if p.suffix.lower() == ".png":
        options = PngOptions(parent)
        if options.exec() != QDialog.Accepted:
            return None
        scale, dpi = options.values()
    try:
        return export_graph(graph, layout, p, scale, dpi)
    except Exception as exc:  # noqa: BLE001 - say why, whatever it is
        QMessageBox.warning(parent, "Export failed", f"Could not write {p}:\n\n{type(exc).__name__}: {exc}")
        return None
