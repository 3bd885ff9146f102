"""Follow mode: a job (lane "follow" of the window's ``Jobs``) that polls run files every
``interval`` seconds for steps after the last one seen, until cancelled.

Payloads (to ``on_progress`` in the GUI thread): ``("steps", {rank: steps-dict})`` with
the new rows as numpy arrays (see ``RunReader.steps``), ``("nodes", {rank: [steps with node
norms]})``. The job opens its own readers (SQLite connections stay in one thread).
"""
from __future__ import annotations

from pathlib import Path

from gradviz.app.jobs import JobContext


def follow_job(paths: list[Path], last_steps: dict[int, int | None], last_node: dict[int, int | None],
               interval: float = 0.3):
    paths, last, last_node = list(paths), dict(last_steps), dict(last_node)

    def job(ctx: JobContext) -> None:
        from gradviz.core.record.reader import RunReader

        readers = []
        try:
            for p in paths:
                readers.append(RunReader(p))
            while True:
                batch, nodes = {}, {}
                for r in readers:
                    got = r.steps(last.get(r.rank))
                    if len(got["step"]):
                        last[r.rank] = int(got["step"][-1])
                        batch[r.rank] = got
                    ns = r.node_steps(last_node.get(r.rank))
                    if ns:
                        last_node[r.rank] = ns[-1]
                        nodes[r.rank] = ns
                if batch:
                    ctx.emit(("steps", batch))
                if nodes:
                    ctx.emit(("nodes", nodes))
                if ctx.sleep(interval):
                    return
        finally:
            for r in readers:
                r.close()

    return job
