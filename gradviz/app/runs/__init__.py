"""Recorded runs in the window: ``install(window)`` per the extension contract.

File ▸ Open run… opens a ``.gvrun`` file (and its sibling rank files): the Run dock
shows loss / gradient-norm / update-ratio curves per rank, a slider over the steps
that have node norms, and the findings derived from the record (click one to
select its nodes). The stored graph structure is shown in the main view and
coloured by the node norms of the chosen step. Follow mode tails a run another
process is writing (polled off the UI thread every 0.3 s).

The graph goes to the window through ``window.show_graph(graph, path)`` when the
window has it; otherwise through the window's own layout runner (what a trace uses).
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from gradviz.app.runs.panel import RunPanel
from gradviz.core.record.schema import FILE_FILTER, RecordError

__all__ = ["install", "open_run_file", "RunPanel", "RUN_SUFFIXES"]

RUN_SUFFIXES = (".gvrun", ".sqlite", ".db")


def install(window) -> RunPanel:
    panel = RunPanel(window)
    window.run_panel = panel
    dock = window.add_dock("Run", panel, Qt.BottomDockWidgetArea)
    panel.dock = dock
    if dock is not None and hasattr(dock, "hide"):
        dock.hide()
    action = QAction("Open run…", window)
    action.setToolTip("Open a run recorded with gradviz.watch (.gvrun)")
    action.triggered.connect(lambda: open_run_dialog(window))
    window.add_action("File", action)
    panel.open_action = action
    panel.stepChosen.connect(lambda step: _step_chosen(window, panel, step))
    return panel


def open_run_dialog(window) -> None:
    start = str(Path.cwd())
    path, _ = QFileDialog.getOpenFileName(window, "Open run", start, FILE_FILTER)
    if path:
        open_run_file(window, path)


def open_run_file(window, path: str | Path) -> bool:
    """Open a run in the window; a bad file is reported with ``window.show_error`` (returns False)."""
    panel: RunPanel = window.run_panel
    previous = getattr(panel, "shown_graph_id", None)
    panel.shown_graph_id = None          # a new run: its first chosen step shows its graph
    try:
        info = panel.open(path)
    except RecordError as exc:
        panel.shown_graph_id = previous
        window.show_error(exc)
        return False
    except Exception as exc:  # noqa: BLE001 - the window must survive any file
        panel.shown_graph_id = previous
        window.show_error(RecordError(f"cannot open the run ({type(exc).__name__}: {exc})", path))
        return False
    dock = getattr(panel, "dock", None)
    if dock is not None:
        dock.show()
        dock.raise_()
    doc = getattr(window, "document", None)
    if doc is not None and isinstance(getattr(doc, "run", None), dict):
        doc.run.update(run_file=str(path), ranks=[r["rank"] for r in info["ranks"]],
                       steps=info["ranks"][0]["steps"] if info["ranks"] else 0)
    return True


def _step_chosen(window, panel: RunPanel, step: int) -> None:
    try:
        s, norms = panel.norms_at(step)
        if s is None:
            return
        gid = panel._graph_id
        if gid is not None and gid != getattr(panel, "shown_graph_id", None):
            graph = panel.graph_at_current()
            if graph is not None:
                panel.shown_graph_id = gid
                _show_graph(window, graph, panel.paths[0])
        window.set_node_norms(norms)
        loss = getattr(panel, "step_loss", None)
        if loss is not None and hasattr(window, "set_loss"):
            window.set_loss(loss)
    except RecordError as exc:
        window.show_error(exc)


def _show_graph(window, graph, path: Path) -> None:
    graph.graph["script"] = str(path)
    window.show_graph(graph, path)