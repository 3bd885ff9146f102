"""Run data out (issue #28): ``gradviz.open_run`` as arrays, ``gradviz runs export`` to CSV / JSON, and
``gradviz export RUN.gvrun --step N`` drawing the run's graph. Torch is the oracle: every exported gradient
norm is the one ``torch.linalg.vector_norm`` gives for the gradients of that step."""
from __future__ import annotations

import csv
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest
import torch
from torch import nn

import gradviz
from gradviz.cli.main import main

STEPS = 12


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small loop recorded with watch, and torch's own norms of every step."""
    path = tmp_path_factory.mktemp("runs") / "exp.gvrun"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    truth = []
    with gradviz.watch(model, path, every=4, optimizer=opt) as w:
        for _ in range(STEPS):
            opt.zero_grad()
            loss = model(torch.randn(16, 4)).pow(2).mean()
            loss.backward()
            truth.append((loss.item(), {n: p.grad.norm().item() for n, p in model.named_parameters()}))
            w.step(loss)
            opt.step()
    return path, truth


def test_open_run_gives_every_step_as_arrays(recorded):
    path, truth = recorded
    run = gradviz.open_run(path)
    assert len(run) == STEPS and run.step.dtype == np.int64 and list(run.step) == list(range(STEPS))
    assert run.param_names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    np.testing.assert_allclose(run.loss, [t[0] for t in truth], rtol=1e-6)
    for name in run.param_names:
        np.testing.assert_allclose(run.grad_norms[name], [t[1][name] for t in truth], rtol=1e-5)
    total = [math.sqrt(sum(v * v for v in t[1].values())) for t in truth]
    np.testing.assert_allclose(run.grad_norm, total, rtol=1e-5)
    assert np.all(run.lr == 0.05)
    assert sorted(run.node_norms) == [0, 4, 8] and run.node_norms[4]["param:0.weight"] == pytest.approx(
        truth[4][1]["0.weight"], rel=1e-5)


def test_frame_is_the_runs_steps_as_a_dataframe(recorded):
    """pandas is a test dependency: the frame is checked against torch's norms, never skipped."""
    path, truth = recorded
    frame = gradviz.open_run(path).frame()
    assert list(frame.index) == list(range(STEPS))
    np.testing.assert_allclose(frame["loss"], [t[0] for t in truth], rtol=1e-6)
    np.testing.assert_allclose(frame["grad_norm/0.weight"], [t[1]["0.weight"] for t in truth], rtol=1e-5)


def test_frame_without_pandas_says_how_to_get_it(recorded, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)      # as if it were not installed
    with pytest.raises(ImportError, match="pip install pandas"):
        gradviz.open_run(recorded[0]).frame()


def test_runs_export_parquet_holds_torchs_norms(recorded, tmp_path):
    import pyarrow.parquet as pq

    path, truth = recorded
    status, out, err = run_cli("runs", "export", path, "-o", tmp_path / "steps.parquet")
    assert status == 0 and out.startswith(f"wrote {tmp_path / 'steps.parquet'} ({STEPS} steps"), err
    table = pq.read_table(tmp_path / "steps.parquet").to_pydict()
    assert table["step"] == list(range(STEPS))
    np.testing.assert_allclose(table["loss"], [t[0] for t in truth], rtol=1e-6)
    for name in ("0.weight", "2.bias"):
        np.testing.assert_allclose(table[f"grad_norm/{name}"], [t[1][name] for t in truth], rtol=1e-5)
    assert not list(tmp_path.glob("*.tmp*"))                  # written under a temporary name, renamed


def test_runs_export_parquet_without_pyarrow_says_how(recorded, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    status, _, err = run_cli("runs", "export", recorded[0], "-o", tmp_path / "steps.parquet")
    assert status == 2 and "pip install pyarrow" in err and "Traceback" not in err
    assert not (tmp_path / "steps.parquet").exists()


def test_runs_export_csv_and_json(recorded, tmp_path):
    path, truth = recorded
    status, out, err = run_cli("runs", "export", path, "-o", tmp_path / "steps.csv")
    assert status == 0, err
    assert out.startswith(f"wrote {tmp_path / 'steps.csv'} ({STEPS} steps, 4 parameters")
    with open(tmp_path / "steps.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == STEPS and int(rows[3]["step"]) == 3
    assert float(rows[3]["grad_norm/2.bias"]) == pytest.approx(truth[3][1]["2.bias"], rel=1e-5)
    assert float(rows[3]["loss"]) == pytest.approx(truth[3][0], rel=1e-6)
    status, out, err = run_cli("runs", "export", path, "-o", tmp_path / "steps.json")
    assert status == 0 and "node norms at 3 steps" in out, err
    data = json.loads((tmp_path / "steps.json").read_text())
    assert data["steps"]["grad_norm/0.bias"][7] == pytest.approx(truth[7][1]["0.bias"], rel=1e-5)
    assert set(data["node_norms"]) == {"0", "4", "8"}


@pytest.mark.parametrize("target, says", [("steps.txt", "write .csv, .json or .parquet"),
                                          ("missing/steps.csv", "cannot write")])
def test_runs_export_refuses_in_one_line(recorded, tmp_path, target, says):
    status, _, err = run_cli("runs", "export", recorded[0], "-o", tmp_path / target)
    assert status == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_export_draws_a_run_at_a_step(recorded, tmp_path):
    """``gradviz export RUN.gvrun`` said "not a Python file"; it draws the graph coloured at that step."""
    path, truth = recorded
    status, out, err = run_cli("export", path, "--step", 5, "-o", tmp_path / "g.json")
    assert status == 0, err
    assert "coloured at step 4 (asked for 5: the nearest sampled step at or before it)" in out
    nodes = {n["id"]: n for n in json.loads((tmp_path / "g.json").read_text())["nodes"]}
    assert nodes["param:2.weight"]["grad_norm"] == pytest.approx(truth[4][1]["2.weight"], rel=1e-5)
    status, out, err = run_cli("export", path, "-o", tmp_path / "g.svg")
    assert status == 0 and "coloured at step 8" in out and "<svg" in (tmp_path / "g.svg").read_text()
