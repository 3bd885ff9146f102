"""``--screenshot`` reaching any state: train N steps in the window's own trainer, select a node,
unfold a fold, then grab the window and write ``--report`` (``app/window_report.py``).

Each stage waits for the window to say it is there (the trainer paused at step N with its
numbers measured; a selection made; a re-grouped view shown) before the next begins; a
stage that cannot be reached ends the screenshot with one line why, never a grab of
something else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gradviz.core.runtime.atomic import atomic_write


@dataclass
class ScreenshotPlan:
    train_steps: int = 0
    select: str | None = None        # a parameter name, a node id or a module path
    unfold: bool = False             # unfold the selected fold (or every fold when none is selected)
    report: str | None = None        # where to write what every panel shows, as JSON

    @property
    def needs_training(self) -> bool:
        return self.train_steps > 0


def resolve_node(doc, name: str) -> str | None:
    """A node the user named: an id (``param:fc1.weight``, ``op:3``, ``fold:...``), a parameter's
    name, a module path (its box), or a fold's label ("Block × 4")."""
    if doc.view is None:
        return None
    for candidate in (name, f"param:{name}", f"group:{name}"):
        if doc.visible_id(candidate):
            return doc.visible_id(candidate)
    for nid, a in doc.view.nodes(data=True):
        if a.get("fold") and (a.get("label") == name or name in (a.get("repeats") or [])):
            return nid
    return None


def exact_node(doc, name: str) -> str | None:
    """The full-graph node the user named (an id or a parameter's name), None for a module or fold."""
    for candidate in (name, f"param:{name}"):
        if doc.graph is not None and candidate in doc.graph:
            return candidate
    return None


def write_report(window, path: str | Path) -> None:
    from gradviz.app.window_report import report

    text = json.dumps(report(window), indent=1, default=str, allow_nan=True)
    atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text + "\n", encoding="utf-8"))


class ScreenshotDriver:
    """Walks the plan's stages on the GUI thread; ``done(error or None)`` when ready to grab."""

    def __init__(self, window, plan: ScreenshotPlan, done) -> None:
        from PySide6.QtCore import QTimer

        self.window, self.plan, self.done = window, plan, done
        self.timer = QTimer()
        self.timer.setInterval(50)
        self.timer.timeout.connect(self._poll)
        self.stage = "train"

    def start(self) -> None:
        w, plan = self.window, self.plan
        if plan.needs_training:
            if w.training_panel is None or w.document.kind != "script":
                self.done("--train-steps needs a model script (and the Training panel)")
                return
            if "show" in w.training_panel.actions:
                w.training_panel.actions["show"].trigger()      # the training panels are in the picture
            w.training_panel.train_steps(plan.train_steps)
        self.timer.start()

    def _poll(self) -> None:
        w, plan, doc = self.window, self.plan, self.window.document
        if self.stage == "train":
            panel = w.training_panel
            if plan.needs_training:
                if panel.state == "stopped" and doc.step != plan.train_steps:
                    self._finish("training stopped before step "
                                 f"{plan.train_steps} (see the Errors panel)")
                    return
                if not (panel.state == "paused" and doc.norms_source == "training" and doc.step == plan.train_steps):
                    return
            self.stage = "select"
        if self.stage == "select":
            if plan.select:
                nid = resolve_node(doc, plan.select)
                if nid is None:
                    self._finish(f"--select {plan.select}: no such node or module in the graph")
                    return
                exact = exact_node(doc, plan.select)
                if exact is not None and exact != nid:     # inside a box: open what holds it, then select it
                    self._target, self._exact = doc.expanded_to_show(exact), exact
                    self.stage = "opening"
                    w.session.set_expanded(self._target)
                    return
                doc.select([nid])
            self.stage = "unfold"
        if self.stage == "opening":
            if doc.expanded != self._target or doc.visible_id(self._exact) != self._exact:
                return
            doc.select([self._exact])
            self.stage = "unfold"
        if self.stage == "unfold":
            if plan.unfold:
                from gradviz.core.layout.folding import unfold_markers

                folds = [a for n, a in doc.view.nodes(data=True) if a.get("fold")
                         and (not doc.selected or n == doc.selected)]
                if not folds:
                    self._finish("--unfold: no folded repeats " + ("selected" if doc.selected else "in the graph"))
                    return
                expanded = set(doc.expanded)
                for f in folds:
                    expanded |= unfold_markers(f, "all")
                self.stage = "unfolding"
                w.session.set_expanded(expanded)
                self._target = expanded
                return
            self.stage = "settle"
        if self.stage == "unfolding":
            if doc.expanded != self._target:
                return
            self.stage = "settle"
        if self.stage == "settle":
            panel = getattr(w, "training_panel", None)
            if plan.needs_training and panel is not None and len(panel.history) < plan.train_steps:
                return                          # the last rows still queued (they come in batches at <= 30 Hz)
            if w.sync.settled() and not w.status.is_busy():
                if panel is not None:
                    # every plot drawn to the last row: a timer tick draws only what fits its frame
                    # budget, so a grab right after the pause caught the loss at step 20, the norms at 8
                    panel.plots_slot.refresh()
                self._finish(None)

    def _finish(self, error: str | None) -> None:
        self.timer.stop()
        if error is None and self.plan.report:
            try:
                write_report(self.window, self.plan.report)
            except OSError as exc:
                error = f"could not write the report {self.plan.report}: {exc}"
        self.done(error)
