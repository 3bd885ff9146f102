"""The training thread: drives ``gradviz.core.train.trainer.Trainer`` off the GUI thread.

Control (from the GUI thread, all non-blocking): ``start_training``, ``pause``,
``resume``, ``step_once``, ``stop``, ``reset``, ``apply_config``. Pause and stop take
effect between two steps (a flag checked after each step; a paused thread sleeps on a
``threading.Event``, no busy waiting). Signals carry plain dicts and numpy arrays,
batched: rows are accumulated and emitted at most ``EMIT_HZ`` times a second.
"""
from __future__ import annotations

import threading
import time
import traceback
from dataclasses import fields, replace

import numpy as np
import torch
from PySide6.QtCore import QThread, Signal

from gradviz.core.runtime.devices import training_threads
from gradviz.core.stats.steps import StepRow, step_columns
from gradviz.core.train.trainer import TrainConfig, Trainer

EMIT_HZ = 30
# changing these needs a new model / optimizer; the others apply between two steps
_REBUILD = ("device", "optimizer", "amp", "amp_dtype", "seed", "momentum", "weight_decay", "track_updates")


def rows_to_columns(rows: list[StepRow]) -> dict:
    """Step rows -> one dict of numpy columns (what History.extend takes), in one numpy pass."""
    cols = step_columns([r.numbers for r in rows])
    n = len(rows)
    return {
        "step": np.fromiter((r.step for r in rows), dtype=np.int64, count=n),
        "loss": np.fromiter((r.loss for r in rows), dtype=np.float64, count=n),
        "grad_norm": cols["grad_norm"], "grad_norm_clipped": cols["grad_norm_clipped"],
        "lr": np.fromiter((r.lr for r in rows), dtype=np.float64, count=n),
        "step_time": np.fromiter((r.step_time for r in rows), dtype=np.float64, count=n),
        "param_norms": cols["param_norms"].astype(np.float32, copy=False),
        "param_norms_clipped": cols["param_norms_clipped"].astype(np.float32, copy=False),
        "update_ratios": cols["update_ratios"].astype(np.float32, copy=False),
        "nonfinite": cols["nonfinite"],
    }


class TrainingWorker(QThread):
    ready = Signal(dict)            # {"names": [...], "device": str, "step": int} when a trainer is (re)built
    rowsReady = Signal(dict)        # a batch of step rows as numpy columns (see rows_to_columns)
    nodeNorms = Signal(dict, int)   # {node_id: norm or None} and the step they were measured at, on sampled steps
    nodeDetail = Signal(dict)       # {"id", "grad": stats, "value": stats | None} of the selected node
    metricsReady = Signal(dict)     # the script's metrics(model), now and then
    stateChanged = Signal(str)      # running | paused | stopped
    probed = Signal(dict)           # every number of the model as it stands (core/train/step_probe.py)
    failed = Signal(object, str)    # exception (ScriptError / NonFiniteLossError / ...), traceback text
    wasReset = Signal()

    def __init__(self, script_path: str, config: TrainConfig | None = None, parent=None, *,
                 max_steps: int | None = None, metrics_interval_s: float = 2.0) -> None:
        super().__init__(parent)
        self.script_path = str(script_path)
        self.config = config or TrainConfig()
        self.max_steps = max_steps
        self.metrics_interval_s = metrics_interval_s
        self._lock = threading.Lock()
        self._go = threading.Event()          # set: train; clear: paused
        self._stop = False
        self._single = 0                      # single steps requested while paused
        self._detail: str | None = None       # node whose full statistics sampled steps report
        self._reset = False
        self._pending_config: TrainConfig | None = None
        self._evaluate_now = False
        self._wakeup = threading.Event()      # set by every control: a paused thread re-checks its flags
        self._probe_wanted = False            # measure the paused model again (a newly selected op)
        self._probed_at: int | None = None    # the step last probed
        self.pause_at: int | None = None      # pause once this many steps are done (then None)
        self.step_index = 0                   # last step done (read from the GUI thread)
        self.trainer: Trainer | None = None   # the thread's trainer (read only while it is paused: tests)
        # the model training stopped at, kept after a clean stop: a node selected then is measured at that
        # step off the UI thread (``panel.py``); dropped when the worker is retired
        self.stopped_trainer: Trainer | None = None
        self.state = "stopped"

    # -- control (GUI thread) ---------------------------------------------
    def start_training(self) -> None:
        """Start (or resume) training flat out."""
        self._go.set()
        self._wake()
        if not self.isRunning():
            self._stop = False
            self.stopped_trainer = None
            self.start()

    def pause(self) -> None:
        self._go.clear()

    def train_steps(self, n: int) -> None:
        """Train ``n`` more steps flat out, then pause."""
        self.pause_at = self.step_index + n
        self.start_training()

    def resume(self) -> None:
        self._go.set()
        self._wake()

    def step_once(self) -> None:
        """One step, then paused (starts the thread paused if needed)."""
        with self._lock:
            self._single += 1
        self._go.clear()
        if not self.isRunning():
            self._stop = False
            self.start()
        self._wake()

    def stop(self) -> None:
        """End the run after the current step; ``wait()`` for the thread."""
        self._stop = True
        self._wake()

    def reset(self) -> None:
        """A fresh model and optimizer (step 0), between two steps."""
        self._reset = True
        self._wake()

    def apply_config(self, config: TrainConfig) -> None:
        """Use ``config`` from the next step on (a new model when device/optimizer/AMP/seed changed)."""
        with self._lock:
            self._pending_config = config
        self.config = config
        self._wake()

    def set_detail_node(self, nid: str | None) -> None:
        """Report full gradient statistics of this node on sampled steps (None: none)."""
        self._detail = nid or None

    def request_probe(self) -> None:
        """Measure the paused model again (with the detail node as it is now)."""
        self._probe_wanted = True
        self._wake()

    def _probe(self, trainer: Trainer) -> None:
        """The numbers of the model as it stands, once per step it stops at (and on request)."""
        from gradviz.core.train.step_probe import probe_step

        self._probe_wanted = False
        self._probed_at = trainer.step_index
        self.probed.emit(probe_step(trainer, self._detail))

    def evaluate_soon(self) -> None:
        self._evaluate_now = True
        self._wake()

    def _wake(self) -> None:
        self._wakeup.set()

    # -- the thread -------------------------------------------------------
    def run(self) -> None:  # noqa: C901 - one loop, kept in one place on purpose
        rows: list[StepRow] = []
        trainer = None
        last_emit = 0.0
        last_metrics = time.perf_counter()

        def flush() -> None:
            nonlocal last_emit
            if rows:
                self.rowsReady.emit(rows_to_columns(rows))
                rows.clear()
            last_emit = time.perf_counter()

        def set_state(state: str) -> None:
            if state != self.state:
                self.state = state
                self.stateChanged.emit(state)

        try:
            trainer = self.trainer = Trainer(self.script_path, self.config)
            if trainer.device.type == "cpu":
                torch.set_num_threads(training_threads())     # this thread's count only
            self.ready.emit(self._info(trainer))
            while not self._stop:
                if self._reset:
                    self._reset = False
                    flush()
                    trainer.reset()
                    self.step_index = 0
                    self._probed_at = None
                    self.wasReset.emit()
                    self.ready.emit(self._info(trainer))
                with self._lock:
                    pending, self._pending_config = self._pending_config, None
                if pending is not None:
                    flush()
                    trainer = self._reconfigure(trainer, pending)
                if self._evaluate_now:
                    self._evaluate_now = False
                    self.metricsReady.emit(trainer.evaluate())
                single = False
                if not self._go.is_set():
                    with self._lock:
                        if self._single > 0:
                            self._single -= 1
                            single = True
                    if not single:
                        flush()
                        set_state("paused")
                        if self._probe_wanted or self._probed_at != trainer.step_index:
                            self._probe(trainer)
                        self._wakeup.clear()
                        # sleep until resumed / stepped / stopped (both events are set by the controls)
                        while not (self._go.is_set() or self._stop or self._reset or self._single
                                   or self._pending_config is not None or self._evaluate_now
                                   or self._probe_wanted):
                            self._wakeup.wait(0.5)
                            self._wakeup.clear()
                        continue
                set_state("running" if not single else "paused")
                trainer.detail_node = self._detail
                row = trainer.step()
                self.step_index = trainer.step_index
                norms, detail = row.node_norms, row.node_detail
                row.node_norms = row.node_detail = None       # the rows' columns go out in batches
                rows.append(row)
                if norms is not None:
                    self.nodeNorms.emit(norms, row.step)
                if detail is not None:
                    self.nodeDetail.emit({**detail, "step": row.step})
                now = time.perf_counter()
                if single or now - last_emit >= 1.0 / EMIT_HZ:
                    flush()
                if now - last_metrics >= self.metrics_interval_s or single:
                    last_metrics = now
                    metrics = trainer.evaluate()
                    if metrics:
                        self.metricsReady.emit(metrics)
                if self.max_steps is not None and trainer.step_index >= self.max_steps:
                    break
                if self.pause_at is not None and trainer.step_index >= self.pause_at:
                    self.pause_at = None
                    self._go.clear()
            flush()
            if trainer is not None and self._probed_at != trainer.step_index:
                self._probe(trainer)          # the numbers of the model training stopped at
            if trainer is not None:
                metrics = trainer.evaluate()
                if metrics:
                    self.metricsReady.emit(metrics)
            self.stopped_trainer = trainer
        except BaseException as exc:  # noqa: BLE001 - reported to the window, the thread ends
            flush()
            self.failed.emit(exc, traceback.format_exc())
        finally:
            rows.clear()
            trainer = self.trainer = None
            self._go.clear()
            self.state = "stopped"
            self.stateChanged.emit("stopped")

    @staticmethod
    def _info(trainer: Trainer) -> dict:
        # (torch's thread count is per thread: only this one reads what training uses)
        return {"names": list(trainer.names), "device": str(trainer.device), "step": 0,
                "threads": torch.get_num_threads()}

    def _reconfigure(self, trainer: Trainer, config: TrainConfig) -> Trainer:
        old = trainer.config
        if any(getattr(old, f) != getattr(config, f) for f in _REBUILD):
            trainer = self.trainer = Trainer(trainer.script, replace(config))
            self.step_index = 0
            self.wasReset.emit()
            self.ready.emit(self._info(trainer))
            return trainer
        lr_changed = config.lr != old.lr
        for f in fields(TrainConfig):
            setattr(old, f.name, getattr(config, f.name))
        if lr_changed and config.lr is not None:
            trainer.base_lrs = [config.lr for _ in trainer.optimizer.param_groups]
            for g in trainer.optimizer.param_groups:
                g["lr"] = config.lr
        trainer._apply_schedule(trainer.step_index)
        return trainer
