"""What a run file holds, read once into plain data for ``gradviz.core.record.analysis``.

Data flows one way: ``RunReader`` (SQLite) -> ``load_run`` -> ``RunData`` (numpy arrays,
graphs, dicts) -> the pure functions of ``analysis``. The loader reads every column the
findings need in one pass, plus the node norms of the one step a finding points into
(the first non-finite step, located with ``analysis.first_nonfinite_step``).

    runs = load_runs(open_ranks("run.gvrun"))
    info = analysis.summary(runs)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import networkx as nx
import numpy as np

from gradviz.core.record import analysis
from gradviz.core.record.reader import RunReader

__all__ = ["RunData", "load_run", "load_runs", "summarize"]


@dataclass
class RunData:
    """One rank's run file as plain data."""

    path: str
    rank: int
    world_size: int
    meta: dict[str, Any]
    param_names: list[str]
    steps: dict[str, np.ndarray]               # RunReader.steps() columns
    node_steps: list[int]                      # steps with per-node norms
    graphs: list[nx.DiGraph]                   # every stored graph structure, in order
    node_norms: dict[int, dict[str, float | None]] = field(default_factory=dict)   # of the steps findings name

    @property
    def label(self) -> str:
        """`` (rank N)`` for a rank of a multi-rank run, else empty (for messages)."""
        return f" (rank {self.rank})" if self.world_size > 1 else ""


def load_run(reader: RunReader) -> RunData:
    steps = reader.steps()
    graphs = [g for g in (reader.graph(gid) for gid, _, _ in reader.graph_ids()) if g is not None]
    data = RunData(path=str(reader.path), rank=reader.rank, world_size=reader.world_size, meta=dict(reader.meta),
                   param_names=list(reader.param_names), steps=steps, node_steps=reader.node_steps(),
                   graphs=graphs)
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
