"""Recorded runs in the window: ``install(host)`` (see ``app/extensions.py``).

File ▸ Open run… (or opening/dropping a ``.gvrun`` file) makes the run a document of its
own (Run ▸ Run a training script… records one first, ``script_run``): the Run dock shows loss / gradient-norm / update-ratio curves per rank, a slider
over the steps that have node norms, and the findings derived from the record (click one
to select its nodes). The stored graph is shown in the main view, coloured by the node
norms and loss of the chosen step. Follow mode tails a run another process is writing
(polled by a job every 0.3 s). Opening anything else closes the run.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from gradviz.app.contract import RunsHost
from gradviz.app.runs.panel import RunPanel
from gradviz.core.loop.advice import SEVERITY as LOOP_SEVERITY
from gradviz.core.record.schema import FILE_FILTER, RecordError

log = logging.getLogger(__name__)

__all__ = ["install", "open_run_file", "RunPanel", "RUN_SUFFIXES"]

RUN_SUFFIXES = (".gvrun", ".sqlite", ".db")
LOOP_CODES = frozenset(LOOP_SEVERITY)


def install(host: RunsHost) -> RunPanel:
    panel = RunPanel(host)
    dock = host.add_dock("Run", panel, Qt.BottomDockWidgetArea)
    panel.dock = dock
    dock.hide()
    action = QAction("Open run…", dock)
    action.setToolTip("Open a run recorded with gradviz.watch (.gvrun)")
    action.triggered.connect(lambda: open_run_dialog(host, panel))
    host.add_action("File", action)
    panel.open_action = action
    host.add_opener(RUN_SUFFIXES, lambda path: open_run_file(host, panel, path))
    _install_script_run(host, panel, dock)
    host.documentChanged.connect(panel.show_document)
    panel.stepChosen.connect(lambda step: _step_chosen(host, panel, step))
    return panel


def _install_script_run(host: RunsHost, panel: RunPanel, dock) -> None:
    """Run ▸ Run a training script…: ``gradviz run`` in a child process (``script_run``), then its run opens."""
    from gradviz.app.runs.script_run import ScriptRun

    def done(run_path: Path, code: int, output: str) -> None:
        last = [line for line in output.splitlines() if line.strip()]
        host.show_message(f"gradviz run ended ({'ok' if code == 0 else f'exit {code}'}): "
                          f"{last[-1] if last else ''}", 8000)
        if run_path is not None and run_path.exists():
            open_run_file(host, panel, run_path)

    runner = ScriptRun(panel, done)
    action = QAction("Run a training script…", dock)
    action.setToolTip("Run your own training script unmodified (gradviz run) and open what it recorded, "
                      "with the loop's findings")

    def start() -> None:
        if runner.ask_and_start():
            host.show_message(f"gradviz run: running {runner.run_path.with_suffix('.py').name} …", 8000)

    action.triggered.connect(start)
    host.add_action("Run", action)
    panel.script_run = runner
    panel.script_run_action = action


def open_run_dialog(host: RunsHost, panel: RunPanel) -> None:
    path, _ = QFileDialog.getOpenFileName(panel, "Open run", str(Path.cwd()), FILE_FILTER)
    if path:
        open_run_file(host, panel, path)


def open_run_file(host: RunsHost, panel: RunPanel, path: str | Path) -> bool:
    """Open a run as the window's document; a bad file leaves a failed document (its error
    shown), never the previous script's graph under the run's name. Returns success."""
    doc = host.begin_document(path, "run")
    try:
        info = panel.open(doc.path, doc)
    except RecordError as exc:
        doc.fail(exc)
        return False
    except Exception as exc:  # noqa: BLE001 - the window must survive any file; the reason is shown
        log.warning("cannot open the run %s", path, exc_info=True)
        doc.fail(RecordError(f"cannot open the run ({type(exc).__name__}: {exc})", path))
        return False
    panel.dock.show()
    panel.dock.raise_()
    loop = [f for f in info["findings"] if f.get("code") in LOOP_CODES]
    if loop:       # the training loop's own bugs: the Diagnosis dock too, each with its line (gradviz.core.loop)
        doc.set_findings({"findings": loop, "seconds": 0.0, "source": "run"})
    doc.run.update(run_file=str(doc.path), ranks=[r["rank"] for r in info["ranks"]],
                   steps=info["ranks"][0]["steps"] if info["ranks"] else 0)
    if doc.graph is None and not panel.node_steps:
        graph = panel.graph_at_current()       # a run with a graph but no node norms yet
        if graph is not None:
            host.show_graph(graph, doc)
    return True


def _step_chosen(host: RunsHost, panel: RunPanel, step: int) -> None:
    doc = panel.doc
    if doc is None:
        return
    try:
        s, norms = panel.norms_at(step)
        if s is None:
            return
        gid = panel.graph_id
        if gid is not None and gid != panel.shown_graph_id:
            graph = panel.graph_at_current()
            if graph is not None:
                panel.shown_graph_id = gid
                graph.graph["script"] = str(doc.path)
                host.show_graph(graph, doc)
        doc.set_norms(norms, s, "recorded")
        if panel.step_loss is not None:
            doc.set_loss(panel.step_loss, s)
    except RecordError as exc:
        host.show_error(exc)
