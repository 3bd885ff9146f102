"""A recorded run as a table of plain arrays: ``gradviz.open_run(path)`` and ``gradviz runs export``.

    run = gradviz.open_run("runs/exp.gvrun")
    run.step, run.loss, run.grad_norm          # numpy arrays, one value per recorded step
    run.grad_norms["fc1.weight"]               # one parameter's gradient norm at every step
    run.node_norms[120]                        # {node id: norm} on a sampled step
    run.frame()                                # a pandas DataFrame (when pandas is installed)

Schema (one row per recorded optimizer step; NaN where a value was not recorded):

- ``step`` (int64): the step number as recorded (``w.step``; the HF and Lightning callbacks number
  steps as their trainer does, from 1); ``time`` (float64): seconds since the epoch;
- ``loss``, ``lr``, ``grad_norm`` (the global L2 norm of every parameter gradient, a tied parameter
  counted once), ``update_ratio`` (``|lr·update| / |weight|`` over the model);
- ``grad_norm/NAME`` and ``update_ratio/NAME`` for each parameter NAME (NaN: no gradient that step);
- node norms (``node_norms``: ``{step: {node id: norm or None}}``) on the sampled steps only
  (``every=``): the graph colours of that step; JSON export holds them, CSV and Parquet do not
  (a table of one column per graph node would be mostly empty).

A run written by several ranks is read from one rank file (``rank=``, default 0).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradviz.core.record.reader import RunReader, open_ranks
from gradviz.core.record.schema import RecordError

__all__ = ["RunTable", "open_run", "export_steps", "EXPORT_SUFFIXES"]

EXPORT_SUFFIXES = (".csv", ".json", ".parquet")
SCALARS = ("step", "time", "loss", "lr", "grad_norm", "update_ratio")


@dataclass
class RunTable:
    """Every recorded step of one rank's run file, as numpy arrays (see the module's schema)."""

    path: str
    rank: int
    param_names: list[str]
    step: np.ndarray
    time: np.ndarray
    loss: np.ndarray
    lr: np.ndarray
    grad_norm: np.ndarray
    update_ratio: np.ndarray
    grad_norms: dict[str, np.ndarray]
    update_ratios: dict[str, np.ndarray]
    node_norms: dict[int, dict[str, float | None]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.step.size)

    def columns(self) -> dict[str, np.ndarray]:
        """The table, one array per column, in the schema's order."""
        out = {name: getattr(self, name) for name in SCALARS}
        out.update((f"grad_norm/{n}", v) for n, v in self.grad_norms.items())
        out.update((f"update_ratio/{n}", v) for n, v in self.update_ratios.items())
        return out

    def frame(self):
        """The table as a ``pandas.DataFrame`` indexed by step (ImportError, said plainly, without pandas)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("RunTable.frame() needs pandas (pip install pandas); the arrays are in "
                              "run.columns()") from None
        return pd.DataFrame(self.columns()).set_index("step")


def open_run(path: str | os.PathLike, *, rank: int = 0, nodes: bool = True) -> RunTable:
    """Read a run file (or the rank files of one run) into a ``RunTable``; ``RecordError`` for a bad one.
    ``nodes``: read the node norms of every sampled step too."""
    readers = open_ranks(path)
    try:
        chosen = next((r for r in readers if r.rank == rank), None)
        if chosen is None:
            raise RecordError(f"no rank {rank} among the {len(readers)} rank file(s) of this run", Path(path))
        return _table(chosen, nodes)
    finally:
        for r in readers:
            r.close()


def _table(reader: RunReader, nodes: bool) -> RunTable:
    cols = reader.steps()
    names = list(reader.param_names)
    norms, ratios = cols["grad_norms"], cols["update_ratios"]
    loss = np.where(cols["loss_given"], cols["loss"], np.nan)
    node_norms = {}
    if nodes:
        for s in reader.node_steps():
            got = reader.node_norms(s)
            if got is not None and got[0] == s:
                node_norms[s] = got[1]
    return RunTable(path=str(reader.path), rank=reader.rank, param_names=names, step=cols["step"],
                    time=cols["time"], loss=loss, lr=cols["lr"], grad_norm=cols["grad_norm"],
                    update_ratio=cols["update_ratio"],
                    grad_norms={n: norms[:, k].copy() for k, n in enumerate(names)},
                    update_ratios={n: ratios[:, k].copy() for k, n in enumerate(names)},
                    node_norms=node_norms, meta=dict(reader.meta))


def _plain(value: Any) -> Any:
    """A JSON value: NaN and infinities as null (JSON has no NaN)."""
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(value) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    return value


def export_steps(table: RunTable, target: str | os.PathLike) -> Path:
    """Write the table to ``target`` (.csv, .json or .parquet, by its suffix), atomically."""
    from gradviz.core.runtime.atomic import atomic_write

    target = Path(target)
    suffix = target.suffix.lower()
    if suffix not in EXPORT_SUFFIXES:
        raise ValueError(f"{target.name}: write .csv, .json or .parquet")
    columns = table.columns()
    if suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError("writing .parquet needs pyarrow (pip install pyarrow); .csv and .json need "
                             "nothing") from None
        return atomic_write(target, lambda tmp: pq.write_table(pa.table(columns), tmp))
    if suffix == ".csv":
        import csv

        def write_csv(tmp: str) -> None:
            with open(tmp, "w", newline="", encoding="utf-8") as handle:
                out = csv.writer(handle)
                out.writerow(list(columns))
                for row in zip(*columns.values()):
                    out.writerow(["" if isinstance(v, float) and math.isnan(v) else repr(float(v))
                                  if isinstance(v, (float, np.floating)) else int(v) for v in row])
        return atomic_write(target, write_csv)
    data = {"path": table.path, "rank": table.rank, "param_names": table.param_names,
            "steps": {k: [_plain(v) for v in values.tolist()] for k, values in columns.items()},
            "node_norms": {str(s): {n: _plain(v) for n, v in norms.items()} for s, norms in table.node_norms.items()}}
    text = json.dumps(data, allow_nan=False)
    return atomic_write(target, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
