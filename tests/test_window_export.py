"""#12 item 3, the window's side: File > Export asks "current view" or "whole graph" (render's
dialog), writes the scene as shown, and the status bar confirms with the path."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QFileDialog

from test_app_support import MLP, open_and_wait


def test_export_dialog_writes_and_confirms_with_the_path(qtbot, window, tmp_path, monkeypatch):
    from gradviz.app import export_dialog

    open_and_wait(qtbot, window, MLP)
    target = tmp_path / "graph.svg"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(target), "")))
    chosen = []

    def accept(dialog):
        dialog.current.setChecked(True)               # the user picks "Current view"
        chosen.append(dialog.what())
        return QDialog.Accepted

    monkeypatch.setattr(export_dialog.ExportOptions, "exec", accept)
    window.acts.export.trigger()
    assert chosen == [export_dialog.CURRENT_VIEW]
    assert target.is_file() and "<svg" in target.read_text()
    assert "current view" in target.read_text()         # the header says what was exported
    assert window.statusBar().currentMessage().startswith(f"Graph saved to {target}")


def test_export_without_a_graph_says_so(qtbot, window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    said = []
    monkeypatch.setattr(QMessageBox, "information", staticmethod(lambda *a: said.append(a[2])))
    assert window.files.export_dialog() is None
    assert said == ["There is no graph to export yet."]


def test_export_to_confirms_too(qtbot, window, tmp_path):
    open_and_wait(qtbot, window, MLP)
    path = window.export_to(tmp_path / "g.png", scale=1.0, dpi=96)
    assert path.is_file() and window.statusBar().currentMessage().startswith(f"Graph saved to {path}")
