"""Bounded training history in numpy ring-style buffers (no Qt).

Columns: ``step``, ``loss``, ``grad_norm``, ``grad_norm_clipped``, ``lr``, ``step_time``
(one value per kept step) and ``param_norms`` / ``param_norms_clipped`` / ``update_ratios`` (one row per kept
step, one column per parameter in ``names``). Buffers grow geometrically up to
``capacity`` rows; when full, every other row is dropped and from then on only every
``stride``-th incoming step is kept, so memory stays bounded and the whole run stays
visible (uniformly thinned: row r is the run's (r * stride)-th step).
"""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from gradviz.core.runtime.atomic import atomic_write

SCALARS = ("step", "loss", "grad_norm", "grad_norm_clipped", "lr", "step_time")
MATRICES = ("param_norms", "param_norms_clipped", "update_ratios")


class History:
    def __init__(self, capacity: int = 100_000, names: Iterable[str] = ()) -> None:
        if capacity < 4:
            raise ValueError("capacity must be at least 4")
        self.capacity = int(capacity)
        self.version = 0          # bumps on every change (plots redraw when it moved)
        self.set_names(list(names))

    # -- shape ------------------------------------------------------------
    def set_names(self, names: list[str]) -> None:
        """The parameters' names; a different list clears the history."""
        self.names = list(names)
        self.clear()

    def clear(self) -> None:
        self._n = 0
        self._seen = 0
        self.stride = 1
        self._alloc = 0
        self._cols: dict[str, np.ndarray] = {}
        self._grow(256)
        self.version += 1

    def _grow(self, rows: int) -> None:
        rows = min(rows, self.capacity)
        p = len(self.names)
        new = {k: np.full(rows, np.nan) for k in SCALARS}
        new["step"] = np.zeros(rows, dtype=np.int64)
        for k in MATRICES:
            new[k] = np.full((rows, p), np.nan, dtype=np.float32)
        for k, old in self._cols.items():
            new[k][: self._n] = old[: self._n]
        self._cols = new
        self._alloc = rows

    def __len__(self) -> int:
        return self._n

    def column(self, key: str) -> np.ndarray:
        """A read-only view of the kept values of ``key``."""
        view = self._cols[key][: self._n]
        view.flags.writeable = False
        return view

    def last(self, key: str):
        return self._cols[key][self._n - 1] if self._n else None

    # -- appending --------------------------------------------------------
    def extend(self, batch: Mapping[str, np.ndarray]) -> None:
        """Append a batch of rows given as columns (``step`` required; missing -> NaN)."""
        steps = np.asarray(batch["step"])
        m = len(steps)
        if m == 0:
            return
        seen = self._seen + np.arange(m)
        keep = np.nonzero(seen % self.stride == 0)[0] if self.stride > 1 else np.arange(m)
        self._seen += m
        if len(keep) == 0:
            return
        p = len(self.names)
        i = 0
        while i < len(keep):
            if self._n == self._alloc:
                if self._alloc < self.capacity:
                    self._grow(self._alloc * 2)
                else:
                    self._decimate()
                    # rows of this batch not yet stored must follow the new stride
                    rest = keep[i:]
                    rest = rest[(self._seen - m + rest) % self.stride == 0]
                    keep = np.concatenate([keep[:i], rest])
                    if i >= len(keep):
                        break
            room = self._alloc - self._n
            take = keep[i:i + room]
            sl = slice(self._n, self._n + len(take))
            for k in SCALARS:
                src = batch.get(k)
                self._cols[k][sl] = np.asarray(src)[take] if src is not None else np.nan
            for k in MATRICES:
                src = batch.get(k)
                if src is not None and np.ndim(src) == 2 and np.shape(src)[1] == p:
                    self._cols[k][sl] = np.asarray(src)[take]
                else:
                    self._cols[k][sl] = np.nan
            self._n += len(take)
            i += len(take)
        self.version += 1

    def _decimate(self) -> None:
        """Keep every other row; from now on keep every 2*stride-th incoming step."""
        for k, arr in self._cols.items():
            kept = arr[: self._n : 2].copy()
            arr[: len(kept)] = kept
        self._n = (self._n + 1) // 2
        self.stride *= 2

    # -- export -----------------------------------------------------------
    def to_csv(self, path: str | os.PathLike) -> Path:
        """Write all kept rows as CSV, atomically (temporary file, then rename)."""
        path = Path(path)
        header = list(SCALARS)
        header += [f"grad_norm:{n}" for n in self.names] + [f"update_ratio:{n}" for n in self.names]
        def write(tmp: str) -> None:
            with open(tmp, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(header)
                cols = [self.column(k) for k in SCALARS]
                pn, ur = self.column("param_norms"), self.column("update_ratios")
                for r in range(self._n):
                    row = [int(cols[0][r])] + [_fmt(c[r]) for c in cols[1:]]
                    row += [_fmt(v) for v in pn[r]] + [_fmt(v) for v in ur[r]]
                    w.writerow(row)
        atomic_write(path, write)
        return path


def _fmt(v) -> str:
    v = float(v)
    return "" if np.isnan(v) else repr(v)
