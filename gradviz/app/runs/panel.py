"""The Run dock: step slider, curves per rank, findings; follow mode."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QSlider, QSplitter,
                               QVBoxLayout, QWidget)

from gradviz.app.contract import RunsHost
from gradviz.app.document import Document
from gradviz.app.jobs import Job
from gradviz.app.runs.follow import follow_job

RANK_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
CURVES = (("loss", "loss", False), ("grad_norm", "global grad norm", True), ("update_ratio", "update ratio", True))
# measured on a cadence (NaN = not measured that step): drawn as the measured points joined,
# as the live training plots do; elsewhere a NaN is a real one and leaves a gap
SPARSE_CURVES = frozenset({"update_ratio"})


class _Curves(QWidget):
    """One small plot per metric; one curve per rank (ranks side by side in each plot).

    The plots (pyqtgraph: 0.3 s to import, 0.15 s to build) are made when a run first has curves
    to draw or the dock is first shown, not when the window starts."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._lay = QHBoxLayout(self)
        self._lay.setContentsMargins(0, 0, 0, 0)
        self.plots: dict[str, Any] = {}                   # pg.PlotWidget per metric, once built
        self.curves: dict[tuple[str, int], Any] = {}
        self.data: dict[int, dict[str, np.ndarray]] = {}
        self.cursor: list[Any] = []                       # pg.InfiniteLine per plot
        self._cursor_at: int | None = None

    def showEvent(self, event) -> None:
        self._build()
        super().showEvent(event)

    def _build(self) -> None:
        if self.plots:
            return
        import pyqtgraph as pg

        for key, title, log in CURVES:
            w = pg.PlotWidget()
            w.setBackground(None)
            w.setTitle(title, size="9pt")
            w.setLogMode(False, log)
            w.showGrid(x=True, y=True, alpha=0.2)
            w.setMinimumHeight(120)
            w.addLegend(offset=(5, 5))
            line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#888", style=Qt.DashLine))
            w.addItem(line)
            if self._cursor_at is not None:
                line.setValue(self._cursor_at)
            self.cursor.append(line)
            self.plots[key] = w
            self._lay.addWidget(w)

    def clear(self) -> None:
        for (key, _), curve in self.curves.items():
            self.plots[key].removeItem(curve)
        for w in self.plots.values():
            legend = w.plotItem.legend
            if legend is not None:
                legend.clear()
        self.curves.clear()
        self.data.clear()

    def append(self, rank: int, steps: dict[str, np.ndarray], n_ranks: int) -> None:
        old = self.data.get(rank)
        if old is None:
            self.data[rank] = {k: np.asarray(steps[k]) for k in ("step", *[c[0] for c in CURVES])}
        else:
            for k in old:
                old[k] = np.concatenate([old[k], steps[k]])
        d = self.data[rank]
        x = d["step"].astype(np.float64)
        for key, _, log in CURVES:
            y = d[key].astype(np.float64)
            if log:
                y = np.where(y > 0, y, np.nan)
            y = np.where(np.isfinite(y), y, np.nan)
            xs = x
            if key in SPARSE_CURVES:
                keep = ~np.isnan(y)
                xs, y = x[keep], y[keep]
            curve = self.curves.get((key, rank))
            if curve is None:
                import pyqtgraph as pg

                self._build()
                pen = pg.mkPen(RANK_COLORS[rank % len(RANK_COLORS)], width=1.5)
                curve = self.plots[key].plot(xs, y, pen=pen, name=f"rank {rank}" if n_ranks > 1 else None,
                                             connect="finite")
                self.curves[(key, rank)] = curve
            else:
                curve.setData(xs, y, connect="finite")

    def set_cursor(self, step: int) -> None:
        self._cursor_at = step
        for line in self.cursor:
            line.setValue(step)


class RunPanel(QWidget):
    """Shows a run (all its rank files): the run document's panel; another document closes it."""

    stepChosen = Signal(int)
    opened = Signal(object)            # the summary dict
    stepsAppended = Signal(int)        # total steps now known (rank 0 / first rank)

    def __init__(self, host: RunsHost, parent=None) -> None:
        super().__init__(parent)
        self.host = host
        self.doc: Document | None = None       # the run document shown
        self.paths: list[Path] = []
        self.ranks: list[int] = []
        self.meta: dict[int, dict] = {}
        self.node_steps: list[int] = []
        self.n_steps: dict[int, int] = {}
        self.last_step: dict[int, int | None] = {}
        self.findings: list[dict] = []
        self.follower: Job | None = None
        self._reader = None                    # reader of the shown rank (UI thread; graph + node norms)
        self.graph_id: int | None = None
        self.shown_graph_id: int | None = None       # the graph id on screen (a new one is laid out)
        self.step_loss: float | None = None          # the loss of the step chosen last
        self.shard_text = ""                          # the shard layout of a sharded run (title tooltip)

        self.title = QLabel("No run open. File ▸ Open run…")
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.follow_box = QCheckBox("Follow")
        self.follow_box.setToolTip("Tail the run while another process writes it")
        self.follow_box.toggled.connect(self.set_follow)
        self.slider = QSlider(Qt.Horizontal)
        self.slider.setEnabled(False)
        self.slider.valueChanged.connect(self._slider_moved)
        self.step_label = QLabel("step –")
        self.step_label.setMinimumWidth(90)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.follow_box)
        row = QHBoxLayout()
        row.addWidget(QLabel("Step"))
        row.addWidget(self.slider, 1)
        row.addWidget(self.step_label)
        self.curves = _Curves()
        self.finding_list = QListWidget()
        self.finding_list.itemClicked.connect(self._finding_clicked)
        self.finding_list.setMinimumWidth(220)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.curves)
        split.addWidget(self.finding_list)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addLayout(row)
        lay.addWidget(split, 1)

    # -- opening -------------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        """Another document than the run shown: the run is closed, the panel emptied."""
        if doc is not self.doc:
            self.close_run()

    def open(self, path: str | Path, doc: Document | None = None) -> dict:
        """Open a run into ``doc`` (raises RecordError for a bad file; the panel is then empty)."""
        from gradviz.core.record.reader import open_ranks
        from gradviz.core.record.analysis import shard_lines
        from gradviz.core.record.loading import summarize

        readers = open_ranks(path)
        try:
            info = summarize(readers)
            all_steps = {r.rank: r.steps(arrays=False) for r in readers}
            node_steps = readers[0].node_steps()
        except Exception:
            for r in readers:
                r.close()
            raise
        self.close_run()
        self.doc = doc
        self._reader = readers[0]
        for r in readers[1:]:
            r.close()
        self.paths = [Path(r.path) for r in readers]
        self.ranks = [r.rank for r in readers]
        self.meta = {r.rank: r.meta for r in readers}
        self.curves.clear()
        n = len(readers)
        for rank, steps in all_steps.items():
            self.curves.append(rank, steps, n)
            self.n_steps[rank] = len(steps["step"])
            self.last_step[rank] = int(steps["step"][-1]) if len(steps["step"]) else None
        self.node_steps = node_steps
        self.set_findings(info["findings"])
        self.shard_text = "\n".join(shard_lines(info["ranks"]))     # FSDP2 / DTensor layout, if sharded
        self._update_title()
        self._reset_slider(select_last=True)
        self.opened.emit(info)
        if any(m.get("status") == "running" for m in self.meta.values()):
            self.follow_box.setChecked(True)
        return info

    def close_run(self) -> None:
        self.set_follow(False)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.paths, self.ranks, self.meta = [], [], {}
        self.node_steps, self.n_steps, self.last_step = [], {}, {}
        self.graph_id = self.shown_graph_id = None
        self.shard_text = ""
        self.doc = None
        self.step_loss = None
        self.curves.clear()
        self.set_findings([])
        self._update_title()
        self._reset_slider()

    def _update_title(self) -> None:
        if not self.paths:
            self.title.setText("No run open. File ▸ Open run…")
            return
        m = self.meta[self.ranks[0]]
        name = self.paths[0].name if len(self.paths) == 1 else f"{self.paths[0].name} … ({len(self.paths)} ranks)"
        steps = self.n_steps.get(self.ranks[0], 0)
        status = m.get("status", "")
        sharded = f", {len(m['param_shards']) - m['param_shards'].count(None)} sharded parameters (hover: layout)" \
            if m.get("param_shards") else ""
        self.title.setText(f"<b>{name}</b> — {m.get('model_class', '').rsplit('.', 1)[-1]}, {steps} steps, "
                           f"node norms at {len(self.node_steps)} steps ({status}){sharded}")
        self.title.setToolTip(self.shard_text)

    def _reset_slider(self, select_last: bool = False) -> None:
        n = len(self.node_steps)
        self.slider.blockSignals(True)
        self.slider.setEnabled(n > 0)
        self.slider.setRange(0, max(0, n - 1))
        if select_last:
            self.slider.setValue(max(0, n - 1))
        self.slider.blockSignals(False)
        if n:
            self._slider_moved(self.slider.value())

    # -- steps -------------------------------------------------------------
    @property
    def current_step(self) -> int | None:
        if not self.node_steps:
            return None
        return self.node_steps[min(self.slider.value(), len(self.node_steps) - 1)]

    def choose_step(self, step: int) -> None:
        """Move the slider to the recorded step nearest ``step`` (at or before it)."""
        if not self.node_steps:
            return
        i = int(np.searchsorted(self.node_steps, step, side="right")) - 1
        self.slider.setValue(max(0, i))

    def graph_at_current(self):
        return self._reader.graph_at(self.current_step) if self._reader is not None else None

    def _slider_moved(self, index: int) -> None:
        step = self.current_step
        if step is None:
            return
        self.step_label.setText(f"step {step}")
        self.curves.set_cursor(step)
        self.stepChosen.emit(step)

    def norms_at(self, step: int) -> tuple[int | None, dict[str, float | None]]:
        if self._reader is None:
            return None, {}
        got = self._reader.node_norms(step)
        if got is None:
            return None, {}
        s, norms = got
        row = self._reader.step_row(s)
        self.step_loss = float(row["loss"]) if row is not None else None
        if row is not None:
            for name, norm, has in zip(self._reader.param_names, row["grad_norms"], row["has_grad"]):
                norms[f"param:{name}"] = float(norm) if has else None
        ids = [gid for gid, first, _ in self._reader.graph_ids() if first <= s]
        self.graph_id = ids[-1] if ids else None
        return s, norms

    # -- follow mode -------------------------------------------------------------
    def set_follow(self, on: bool) -> None:
        if on and self.follower is None and self.paths:
            job = follow_job(self.paths, dict(self.last_step),
                             {self.ranks[0]: self.node_steps[-1] if self.node_steps else None})
            self.follower = self.host.jobs.submit("follow", job, document=self.doc, on_progress=self._followed,
                                                  on_failed=self._follow_failed)
        elif not on and self.follower is not None:
            f, self.follower = self.follower, None
            f.cancel()
        if self.follow_box.isChecked() != bool(on and self.paths):
            self.follow_box.blockSignals(True)
            self.follow_box.setChecked(bool(on and self.paths))
            self.follow_box.blockSignals(False)

    def _followed(self, payload) -> None:
        kind, batch = payload
        if kind == "steps":
            self._new_steps(batch)
        else:
            self._new_node_steps(batch)

    def _new_steps(self, batch: dict) -> None:
        n = len(self.ranks)
        for rank, steps in batch.items():
            self.curves.append(rank, steps, n)
            self.n_steps[rank] = self.n_steps.get(rank, 0) + len(steps["step"])
            self.last_step[rank] = int(steps["step"][-1])
        self._update_title()
        self.stepsAppended.emit(self.n_steps.get(self.ranks[0], 0))

    def _new_node_steps(self, batch: dict) -> None:
        new = batch.get(self.ranks[0]) if self.ranks else None
        if not new:
            return
        at_end = self.slider.value() >= len(self.node_steps) - 1
        self.node_steps.extend(s for s in new if not self.node_steps or s > self.node_steps[-1])
        self._update_title()
        self._reset_slider(select_last=at_end)

    def _follow_failed(self, exc: BaseException, details: str) -> None:
        self.set_follow(False)
        self.host.show_error(f"Following the run stopped: {exc}", details=details)

    # -- findings ----------------------------------------------------------------
    def set_findings(self, findings: list[dict]) -> None:
        self.findings = list(findings)
        self.finding_list.clear()
        if not findings:
            self.finding_list.addItem(QListWidgetItem("No findings"))
            return
        for f in findings:
            item = QListWidgetItem(f"[{f['severity']}] {f['message']}")
            item.setToolTip(f["message"])
            item.setData(Qt.UserRole, f)
            self.finding_list.addItem(item)

    def _finding_clicked(self, item: QListWidgetItem) -> None:
        f = item.data(Qt.UserRole)
        if not f:
            return
        step = (f.get("data") or {}).get("step") or (f.get("data") or {}).get("first_step")
        if isinstance(step, int):
            self.choose_step(step)
        nodes = list(f.get("nodes") or [])
        if nodes and self.doc is not None:
            self.doc.select(nodes)

    def shutdown(self) -> None:
        self.close_run()
