"""A run's files read once into ``RunData`` for ``gradviz.core.record.analysis``.

Data flows one way: ``RunReader`` (SQLite) -> ``load_run`` -> ``RunData`` (numpy arrays,
graphs, dicts) -> the pure functions of ``analysis``. The loader reads every column the
findings need in one pass, plus the node norms of the one step a finding points into
(the first non-finite step, located with ``analysis.first_nonfinite_step``).

    runs = load_runs(open_ranks("run.gvrun"))
    info = analysis.summary(runs)
"""
from __future__ import annotations

from typing import Any, Sequence

from gradviz.core.record import analysis
from gradviz.core.record.reader import RunReader
from gradviz.core.record.rundata import RunData

__all__ = ["load_run", "load_runs", "summarize"]


def load_run(reader: RunReader) -> RunData:
    steps = reader.steps()
    graphs = [g for g in (reader.graph(gid) for gid, _, _ in reader.graph_ids()) if g is not None]
    data = RunData(path=str(reader.path), rank=reader.rank, world_size=reader.world_size, meta=dict(reader.meta),
                   param_names=list(reader.param_names), steps=steps, node_steps=reader.node_steps(),
                   graphs=graphs, notes=list(reader.notes))
    bad = analysis.first_nonfinite_step(data)
    if bad is not None:
        got = reader.node_norms(bad)
        if got is not None and got[0] == bad:
            data.node_norms[bad] = got[1]
    return data


def load_runs(readers: Sequence[RunReader]) -> list[RunData]:
    return [load_run(r) for r in readers]


def summarize(readers: Sequence[RunReader]) -> dict[str, Any]:
    """``analysis.summary`` of the open rank files of one run (``gradviz runs show``, the app)."""
    return analysis.summary(load_runs(readers))
