"""Fuzzing the run-file reader (issue #24, part B), bounded in time: mutated SQLite bytes, mutated
metadata JSON, wrongly typed cells. Whatever the file holds, reading it (``open_ranks``, the
summary ``runs show`` prints, a graph with its norms, ``runs diff``) ends in a clean read or a
``RecordError``, never another exception.

hypothesis draws the mutations (derandomized: CI sees the same examples every run; a failure
prints the example that broke it).
"""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from gradviz.core.record import RecordError, watch
from gradviz.core.record.compare import compare
from gradviz.core.record.loading import summarize
from gradviz.core.record.reader import open_ranks

# GRADVIZ_FUZZ_EXAMPLES=2000 (and GRADVIZ_FUZZ_RANDOM=1 for fresh examples) fuzzes longer by hand
FUZZ = settings(max_examples=int(os.environ.get("GRADVIZ_FUZZ_EXAMPLES", "60")), deadline=None,
                derandomize=not os.environ.get("GRADVIZ_FUZZ_RANDOM"), database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> Path:
    """The bytes of a closed run: 16 steps, node norms every 4, an optimizer (update ratios)."""
    path = tmp_path_factory.mktemp("fuzz") / "good.gvrun"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, path, every=4, optimizer=opt) as w:
        for i in range(16):
            opt.zero_grad()
            loss = model(torch.randn(3, 4)).pow(2).mean()
            loss.backward()
            w.step(loss)
            opt.step()
    return path


def read_everything(path: Path) -> None:
    """What the CLI and the app read from a run; RecordError is the only exception allowed."""
    readers = open_ranks(path)
    try:
        summarize(readers)
        for r in readers:
            r.steps(since=3)
            r.graph_at(None)
            r.graph_at(5)
            r.node_norms(0)
            for gid, _, _ in r.graph_ids():
                r.graph(gid)
    finally:
        for r in readers:
            r.close()
    compare(f"{path}@first", str(path)).to_dict()


def _outcome(path: Path) -> str:
    try:
        read_everything(path)
    except RecordError:
        return "refused"
    return "read"


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 2 ** 20), st.integers(0, 255)), min_size=1, max_size=12),
       cut=st.one_of(st.none(), st.integers(0, 2 ** 20)))
def test_mutated_sqlite_bytes(tmp_path, good_run, flips, cut):
    data = bytearray(good_run.read_bytes())
    for offset, value in flips:
        data[offset % len(data)] = value
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    path = tmp_path / "bytes.gvrun"
    path.write_bytes(bytes(data))
    assert _outcome(path) in ("read", "refused")


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)
META_KEYS = ["format", "rank", "world_size", "node", "nodes", "local_rank", "pid", "every", "steps", "created",
             "param_names", "param_shapes", "param_numel", "param_shards", "model_changes", "status", "model_class",
             "hostname", "argv", "norms", "optimizer", "device", "wrapper"]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(META_KEYS), JSON | st.just("not json{")), min_size=1, max_size=3))
def test_mutated_metadata(tmp_path, good_run, edits):
    path = tmp_path / "meta.gvrun"
    path.write_bytes(good_run.read_bytes())
    conn = sqlite3.connect(path)
    for key, value in edits:
        text = value if value == "not json{" else json.dumps(value)
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, text))
    conn.commit()
    conn.close()
    assert _outcome(path) in ("read", "refused")


CELL = (st.none() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.floats(allow_nan=False) | st.text(max_size=12)
        | st.binary(max_size=40))
CELLS = [("steps", c) for c in ("time", "loss", "grad_norm", "lr", "update_ratio", "grad_norms", "update_ratios",
                                 "node_sampled")] + \
        [("graphs", c) for c in ("step", "hash", "nodes", "graph")] + [("node_norms", c) for c in ("graph_id", "norms")]


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(CELLS), st.integers(0, 20), CELL), min_size=1, max_size=4))
def test_wrongly_typed_cells(tmp_path, good_run, edits):
    path = tmp_path / "cells.gvrun"
    path.write_bytes(good_run.read_bytes())
    conn = sqlite3.connect(path)
    for (table, column), row, value in edits:
        key = "id" if table == "graphs" else "step"
        try:
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key} = (SELECT {key} FROM {table} "
                         f"ORDER BY {key} LIMIT 1 OFFSET ?)", (value, row % 16))
        except sqlite3.IntegrityError:          # NOT NULL columns refuse a NULL: the file cannot hold one
            pass
    conn.commit()
    conn.close()
    assert _outcome(path) in ("read", "refused")
