"""What the training thread's signals do: rows, sampled norms, a node's statistics, the paused
model's numbers (``core/train/step_probe.py``) and metrics go into the trained document and the
live labels. A retired worker's late signals (another document's training) are dropped.

A mixin of ``TrainingPanel`` (``panel.py``): it uses the panel's ``doc``, ``worker``, ``history``,
``plots``, ``plots_slot``, ``host`` and its labels.
"""
from __future__ import annotations

import math

from gradviz.app.training.worker import TrainingWorker


class WorkerSignals:
    def _from_retired_worker(self) -> bool:
        """This slot runs for a worker's signal, and not the current worker's. (Only a worker counts:
        called directly from another slot — the document changed — ``sender()`` is that slot's.)"""
        sender = self.sender()
        return isinstance(sender, TrainingWorker) and sender is not self.worker

    # -- worker signals (slots of TrainingPanel) ---------------------------
    def _on_ready(self, info: dict) -> None:
        self.history.set_names(info["names"])
        self.plots.set_names(info["names"])
        self.rate_label.setText(info.get("device", ""))

    def _on_reset(self) -> None:
        self.history.clear()
        self.plots.refresh(force=True)

    def _on_rows(self, cols: dict) -> None:
        if self._from_retired_worker():
            return                  # a retired worker's last rows (another document's training)
        self.history.extend(cols)
        steps = cols["step"]
        if len(steps):
            # step s measured the model after s updates (core/train/step_probe.py): its loss is step s's
            s = int(steps[-1])
            self.doc.set_model_step(s + 1)
            loss = float(cols["loss"][-1])
            self._show_live(s + 1, loss, s)
            self.doc.set_loss(loss, s)
            st = cols.get("step_time")
            if st is not None and len(st):
                mean = float(st.mean())
                if mean > 0:
                    self.rate_label.setText(f"{1.0 / mean:.0f} steps/s")

    def _recompute(self, worker: TrainingWorker, nid: str) -> bool:
        """Measure the paused model again with ``nid`` in detail (its statistics at this step)."""
        if worker is not self.worker or not worker.isRunning() or self._probed_for == (self.doc.model_step, nid):
            return False          # (measured at this step already: the node did not run)
        self._selected = nid or None
        worker.set_detail_node(self._selected)
        worker.request_probe()
        return True

    def _recompute_stopped(self, worker: TrainingWorker, nid: str) -> bool:
        """Measure the model training stopped at with ``nid`` in detail, on a job lane (the thread
        that trained has ended; the model it stopped at is kept until the worker is retired)."""
        trainer = worker.stopped_trainer
        wanted = (self.doc.model_step, nid or None)
        if worker is not self.worker or trainer is None or self._probed_for == wanted or \
                self._stopped_probe == wanted:
            return False
        self._stopped_probe = wanted

        def job(ctx):
            from gradviz.core.train.step_probe import probe_step

            ctx.phase(f"measuring step {trainer.step_index:,}")
            return probe_step(trainer, nid or None)

        def done(values: dict) -> None:
            self._stopped_probe = None
            self._on_probed(worker, values)

        def failed(exc: BaseException, text: str) -> None:
            self._stopped_probe = None
            self.host.show_message(f"the model training stopped at could not be measured: {exc}", 8000)

        self.host.jobs.submit("probe", job, document=self.doc, on_done=done, on_failed=failed)
        return True

    def _show_live(self, done: int, loss: float | None, loss_step: int | None) -> None:
        """The live labels: how many steps are done, and the loss with the step it is of."""
        self.step_label.setText(f"{done:,} steps done")
        if loss is None:
            self.loss_label.setText("loss —")
        else:
            text = f"{loss:.4g}" if math.isfinite(loss) else str(loss)
            self.loss_label.setText(f"loss {text} (step {loss_step:,})")

    def _on_probed(self, worker, values: dict) -> None:
        """Every number of the model as it stands (paused or stopped): the document's step."""
        if worker is not self.worker:
            return
        self._probed_for = (values["step"], values.get("detail"))
        self.doc.set_model_step(values["step"])
        self.doc.set_step_values(values, "training")
        self._show_live(values["step"], values.get("loss"), values["step"])
        self.plots_slot.recolor(self.host.node_color)

    def _on_norms(self, norms: dict, step: int) -> None:
        if self._from_retired_worker():
            return
        self.doc.set_norms(norms, step, "training")   # step s: the model after s updates
        self.plots_slot.recolor(self.host.node_color)

    def _on_detail(self, detail: dict) -> None:
        """Fresh statistics of the selected node: the inspector follows training."""
        if self._from_retired_worker():
            return
        self.doc.update_node_stats(detail["id"], detail.get("grad"), detail.get("value"), detail.get("step"))

    def _on_metrics(self, metrics: dict) -> None:
        if self._from_retired_worker():
            return
        self.last_metrics = dict(metrics)
        if "accuracy" in metrics:
            self.acc_label.setText(f"accuracy {100 * metrics['accuracy']:.1f} %")
        elif metrics:
            k, v = next(iter(metrics.items()))
            self.acc_label.setText(f"{k} {v:.4g}")

    def _on_failed(self, exc, details: str) -> None:
        if self.doc is self.host.document:
            self.host.show_error(exc, details)

