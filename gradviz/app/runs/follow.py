"""Reading run files off the UI thread: the initial load and the follow-mode poller.

Workers hand the UI small dicts of numpy arrays, never readers or tensors. Each
worker thread opens its own ``RunReader`` (SQLite connections stay in one thread).
"""
from __future__ import annotations

import threading
import traceback
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal


class FollowThread(QThread):
    """Polls run files every ``interval`` seconds for steps after the last one seen.

    ``newSteps(dict)``: {rank: steps-dict (numpy arrays, see ``RunReader.steps``)} of the
    new rows; ``newNodeSteps(dict)``: {rank: [steps with node norms]};
    ``failed(str)``: a reading error (the thread stops).
    """

    newSteps = Signal(object)
    newNodeSteps = Signal(object)
    failed = Signal(str)

    def __init__(self, paths: list[Path], last_steps: dict[int, int | None], last_node: dict[int, int | None],
                 interval: float = 0.3, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.paths = list(paths)
        self.last = dict(last_steps)
        self.last_node = dict(last_node)
        self.interval = float(interval)
        self._stop = threading.Event()

    def stop(self, wait_ms: int = 5000) -> bool:
        self._stop.set()
        return self.wait(wait_ms)

    def run(self) -> None:
        from gradviz.core.record.reader import RunReader
        from gradviz.core.record.schema import RecordError

        readers = []
        try:
            for p in self.paths:
                readers.append(RunReader(p))
            while not self._stop.is_set():
                batch, nodes = {}, {}
                for r in readers:
                    got = r.steps(self.last.get(r.rank))
                    if len(got["step"]):
                        self.last[r.rank] = int(got["step"][-1])
                        batch[r.rank] = got
                    ns = r.node_steps(self.last_node.get(r.rank))
                    if ns:
                        self.last_node[r.rank] = ns[-1]
                        nodes[r.rank] = ns
                if batch:
                    self.newSteps.emit(batch)
                if nodes:
                    self.newNodeSteps.emit(nodes)
                self._stop.wait(self.interval)
        except RecordError as exc:
            self.failed.emit(str(exc))
        except Exception:  # noqa: BLE001 - never take the window down
            self.failed.emit(traceback.format_exc())
        finally:
            for r in readers:
                r.close()
