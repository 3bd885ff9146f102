"""What a run file holds, as plain data (``RunData``): the one type the reader's side fills
(``loading.load_run``) and the pure functions of ``analysis`` read."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

__all__ = ["RunData"]


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
    notes: list[str] = field(default_factory=list)       # what the reader could not read (RunReader.notes)

    @property
    def label(self) -> str:
        """`` (rank N)`` for a rank of a multi-rank run, else empty (for messages)."""
        return f" (rank {self.rank})" if self.world_size > 1 else ""
