"""File ▸ Export graph…: the scene on screen, as it is, to PNG, SVG or PDF.

What is exported is the window's own scene (``gradviz.render.export.formats.export_scene``):
the values of the step on screen, its colour range, the collapsed and expanded modules,
the diagnosis marks, each explained in the legend, and a header that says so. The user
picks "Current view" (the part of the graph in the window) or "Whole graph". A PNG over
100 MP is scaled down (the dialog says to what) unless full-resolution tiles are asked
for. Files are written atomically; a failure says why.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (QButtonGroup, QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog,
                               QFormLayout, QLabel, QMessageBox, QRadioButton, QVBoxLayout, QWidget)

from gradviz.core.runtime.formatting import number
from gradviz.render.export.formats import IMAGE_FORMATS, FORMATS, ExportError, ExportResult, ImageOptions, export_scene
from gradviz.render.export.image_export import cap_limit, make_page, png_scale

FILTERS = {f"{FORMATS[ext].label} (*{ext})": ext for ext in (".png", ".svg", ".pdf")}
SCALES = [1.0, 2.0, 3.0, 4.0]
DPIS = [72, 96, 150, 300]
CURRENT_VIEW, WHOLE_GRAPH = "current view", "whole graph"


def visible_region(view):
    """The scene rectangle the view shows now."""
    return view.mapToScene(view.viewport().rect()).boundingRect()


def export_view(view, path: str | Path, what: str = WHOLE_GRAPH, options: ImageOptions | None = None) -> ExportResult:
    """Export ``view``'s scene as shown: ``what`` = 'current view' (the visible part) or 'whole graph'."""
    region = visible_region(view) if what == CURRENT_VIEW else None
    return export_scene(view.scene(), path, options or ImageOptions(), region=region)


class ExportOptions(QDialog):
    """Current view or whole graph; for PNG the scale, the resolution, and tiles past the cap."""

    def __init__(self, view, suffix: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view, self.suffix = view, suffix
        self.setWindowTitle("Export graph")
        self.current = QRadioButton("Current view: the part of the graph in the window")
        self.whole = QRadioButton("Whole graph: every box of the graph as grouped now")
        self.whole.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.current)
        group.addButton(self.whole)
        self.scale, self.dpi = QComboBox(), QComboBox()
        for s in SCALES:
            self.scale.addItem(f"{s:g}×", s)
        self.scale.setCurrentIndex(1)
        for d in DPIS:
            self.dpi.addItem(f"{d} dpi", d)
        self.dpi.setCurrentIndex(2)
        self.tiles = QCheckBox("Also write full-resolution tiles")
        self.size_note = QLabel()
        self.size_note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        box = QVBoxLayout(self)
        box.addWidget(self.current)
        box.addWidget(self.whole)
        if suffix == ".png":
            form = QFormLayout()
            form.addRow("Scale", self.scale)
            form.addRow("Resolution", self.dpi)
            box.addLayout(form)
            box.addWidget(self.size_note)
            box.addWidget(self.tiles)
            for signal in (self.scale.currentIndexChanged, self.current.toggled):
                signal.connect(self._update_note)
            self._update_note()
        box.addWidget(buttons)

    def what(self) -> str:
        return CURRENT_VIEW if self.current.isChecked() else WHOLE_GRAPH

    def options(self) -> ImageOptions:
        png = self.suffix == ".png"
        return ImageOptions(scale=float(self.scale.currentData()) if png else 1.0,
                            dpi=float(self.dpi.currentData()) if png else None,
                            tiles=png and self.tiles.isChecked())

    def _update_note(self) -> None:
        region = visible_region(self.view) if self.what() == CURRENT_VIEW else None
        try:
            page = make_page(self.view.scene(), region)
        except ExportError as exc:
            self.size_note.setText(str(exc))
            return
        asked = float(self.scale.currentData())
        s = png_scale(page, asked)
        w, h = round(page.width * s), round(page.height * s)
        text = f"{number(w, grouped=True)} × {number(h, grouped=True)} pixels"
        capped = s < asked - 1e-9
        if capped:
            text += f": scaled to {s:.2g}× to stay within {cap_limit((w, h))} (SVG and PDF keep every detail)"
        self.size_note.setText(text)
        self.tiles.setEnabled(capped)
        if not capped:
            self.tiles.setChecked(False)


def ask_and_export(parent: QWidget, view, suggested: str) -> ExportResult | None:
    """The interactive path: file dialog, options, export, message box on failure."""
    path, chosen = QFileDialog.getSaveFileName(parent, "Export graph", suggested, ";;".join(FILTERS))
    if not path:
        return None
    p = Path(path)
    if p.suffix.lower() not in IMAGE_FORMATS:
        p = p.with_suffix(FILTERS.get(chosen, ".png"))
    options = ExportOptions(view, p.suffix.lower(), parent)
    if options.exec() != QDialog.Accepted:
        return None
    try:
        return export_view(view, p, options.what(), options.options())
    except (ExportError, OSError) as exc:
        QMessageBox.warning(parent, "Export failed", f"Could not write {p}:\n\n{exc}")
        return None
