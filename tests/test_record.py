"""gradviz.watch: recording a training loop into a run file and reading it back."""
from __future__ import annotations

import gc
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.core.record import RecordError, open_run, watch
from gradviz.core.record.analysis import findings, run_findings
from gradviz.core.record.loading import load_run
from gradviz.core.record.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)
        self.unused = nn.Linear(2, 2)

    def forward(self, x, extra=False):
        h = torch.tanh(self.fc1(x))
        if extra:
            h = h * 2 + 1
        return self.fc2(h)


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 6, generator=g), torch.randint(3, (8,), generator=g)


@pytest.mark.parametrize("order", ["step_first", "optimizer_first"])
def test_round_trip_every_field(tmp_path, order, accel):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    path = tmp_path / "r.gvrun"
    seen = []
    with watch(model, path, every=1, optimizer=opt) as w:
        for step in range(5):
            x, y = _data(step)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            names = [n for n, _ in model.named_parameters()]
            before = {n: p.detach().clone() for n, p in model.named_parameters()}
            grads = [(-1.0 if p.grad is None else p.grad.norm().item()) for p in model.parameters()]
            lr = opt.param_groups[0]["lr"]
            if order == "step_first":
                w.step(loss)
                opt.step()
            else:
                opt.step()
                w.step(loss)
            ratios = [((p.detach() - before[n]).norm() / before[n].norm()).item()
                      for n, p in model.named_parameters()]
            sched.step()
            seen.append((loss.item(), grads, lr, ratios))
        assert w.stats.strategy == ("native" if accel == "native" else "host")
    with open_run(path) as r:
        assert r.param_names == names
        assert r.meta["status"] == "closed" and r.meta["world_size"] == 1 and r.meta["rank"] == 0
        assert r.meta["model_class"].endswith("Net") and r.meta["pid"] == os.getpid()
        s = r.steps()
        assert s["step"].tolist() == [0, 1, 2, 3, 4]
        assert np.all(np.diff(s["time"]) >= 0)
        for i, (loss, grads, lr, ratios) in enumerate(seen):
            assert s["loss"][i] == pytest.approx(loss, rel=1e-6)
            got = np.where(s["has_grad"][i], s["grad_norms"][i], -1.0)
            np.testing.assert_allclose(got, grads, rtol=1e-6)
            assert s["has_grad"][i].tolist() == [True] * 4 + [False] * 2
            g = np.array([v for v in grads if v >= 0])
            assert s["grad_norm"][i] == pytest.approx(math.sqrt((g ** 2).sum()), rel=1e-6)
            assert s["lr"][i] == pytest.approx(lr)
            np.testing.assert_allclose(s["update_ratios"][i][:4], ratios[:4], rtol=1e-4)
            assert s["update_ratio"][i] > 0
        assert s["node_sampled"].all()


def test_node_norms_match_trace(tmp_path, accel):
    import gradviz.core.trace.tracer as gtrace

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    traced = {}
    with watch(model, tmp_path / "n.gvrun", every=3, optimizer=opt) as w:
        for step in range(7):
            x, y = _data(step)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if step % 3 == 0:
                g = gtrace.trace(loss, model, input_grads=False)     # autograd.grad: .grad untouched
                traced[step] = {n: a["grad_norm"] for n, a in g.nodes(data=True)}
            loss.backward()
            w.step(loss)
            opt.step()
        if accel == "native":                    # step 0 learns the structure, 3 and 6 take it natively
            assert w.nodes.native.hooks_placed == 2
    with open_run(tmp_path / "n.gvrun") as r:
        assert r.node_steps() == [0, 3, 6]
        assert len(r.graph_ids()) == 1
        for step, expect in traced.items():
            s, norms = r.node_norms(step)
            assert s == step
            common = [n for n in expect if n in norms]
            assert len(common) >= len(expect) - 2          # the unused params are in both
            for nid in common:
                e, got = expect[nid], norms[nid]
                if e is None:
                    assert got is None, nid
                else:
                    assert got == pytest.approx(e, rel=1e-5, abs=1e-7), nid
        g = r.graph_at(3)
        assert g.graph["step"] == 3
        assert g.nodes["loss"]["value"] == pytest.approx(r.steps()["loss"][3])      # not step 0's
        kinds = {a["kind"] for _, a in g.nodes(data=True)}
        assert {"op", "param", "loss"} <= kinds
        assert g.nodes["param:unused.weight"]["reachable"] is False
        assert g.nodes["param:unused.weight"]["grad_norm"] is None
        assert g.nodes["param:fc1.weight"]["grad_norm"] > 0
        # module paths from the forward capture of the first sampled step
        mods = {a["module"] for _, a in g.nodes(data=True) if a["kind"] == "op"}
        assert {"fc1", "fc2"} <= mods
        assert "fc1" in g.graph["modules"]
        for u, v in g.edges:
            assert "shape" in g.edges[u, v]


def test_structure_change_records_new_graph(tmp_path, accel):
    model = Net()
    with watch(model, tmp_path / "s.gvrun", every=1) as w:
        for step in range(4):
            x, y = _data(step)
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(x, extra=step >= 2), y)
            loss.backward()
            w.step(loss)
        if accel == "native":
            # step 1 repeats step 0's structure (native); step 3 still captures the new
            # structure's module paths (the Python path does that), after which it is learned
            assert w.nodes.native.hooks_placed == 1 and len(w.nodes._native_entries) == 2
    with open_run(tmp_path / "s.gvrun") as r:
        ids = r.graph_ids()
        assert [s for _, s, _ in ids] == [0, 2]
        assert ids[0][2] != ids[1][2]
        assert r.graph(ids[1][0]).number_of_nodes() > r.graph(ids[0][0]).number_of_nodes()
        assert r.node_norms(1)[1].keys() == set(r.graph(ids[0][0]).nodes)
        assert r.node_norms(3)[1].keys() == set(r.graph(ids[1][0]).nodes)


class _Keep(torch.autograd.Function):
    """Identity whose ctx holds a sentinel: the sentinel dies with the autograd node."""

    alive: list = []

    @staticmethod
    def forward(ctx, x):
        class Sentinel:
            pass
        s = Sentinel()
        ctx.sentinel = s
        _Keep.alive.append(weakref.ref(s))
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


def test_no_graph_kept_alive(tmp_path, accel):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _Keep.alive.clear()
    outs = []
    with watch(model, tmp_path / "m.gvrun", every=1, optimizer=opt) as w:
        for step in range(3):
            x, y = _data(step)
            opt.zero_grad()
            out = model(x)
            outs.append(weakref.ref(out))
            loss = nn.functional.cross_entropy(_Keep.apply(out), y)
            loss.backward()
            w.step(loss)
            opt.step()
            del out, loss
            gc.collect()
            assert all(ref() is None for ref in _Keep.alive), "an autograd node outlived its step"
            assert all(ref() is None for ref in outs)
    assert len(_Keep.alive) == 3


def test_unwritable_path_raises_at_construction(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(RecordError, match="file.txt"):
        watch(Net(), blocker / "run.gvrun")
    with pytest.raises(RecordError, match="directory"):
        watch(Net(), tmp_path)
    # a file that is not a run is never overwritten
    with pytest.raises(RecordError, match="not a gradviz run"):
        watch(Net(), blocker)
    assert blocker.read_text() == "x"


def test_disk_full_surfaces_in_step(tmp_path):
    model = Net()
    w = watch(model, tmp_path / "full.gvrun", every=0, commit_every=5)
    w._writer._conn.execute("PRAGMA max_page_count=8")       # the database cannot grow: SQLITE_FULL
    with pytest.raises(RecordError, match="full"):
        for step in range(200):
            x, y = _data(step)
            model.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            w.step(1.0)
    with pytest.raises(RecordError, match="full"):     # closing cannot write the steps waiting either
        w.close()
    assert w.loop.closed                               # and the loop doctor's global hooks are gone


def test_every_zero_and_plain_float_loss(tmp_path):
    model = Net()
    with watch(model, tmp_path / "z.gvrun", every=0) as w:
        for step in range(3):
            x, y = _data(step)
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            w.step(loss.item())
    with open_run(tmp_path / "z.gvrun") as r:
        assert r.node_steps() == [] and r.graph_ids() == []
        assert np.isnan(r.steps()["lr"]).all()
        assert r.n_steps() == 3


# -- bad files ----------------------------------------------------------------

def _good_run(path: Path, steps: int = 120) -> Path:
    model = Net()
    with watch(model, path, every=10) as w:
        for step in range(steps):
            x, y = _data(step)
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            w.step(loss)
    return path


def test_bad_files_give_clear_errors(tmp_path):
    text = tmp_path / "notes.gvrun"
    text.write_text("hello, not a database\n" * 20)
    with pytest.raises(RecordError, match="not a gradviz run"):
        open_run(text)
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t(a)")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="another application"):
        open_run(foreign)
    with pytest.raises(RecordError, match="no such"):
        open_run(tmp_path / "missing.gvrun")

    good = _good_run(tmp_path / "good.gvrun")
    data = good.read_bytes()
    truncated = tmp_path / "trunc.gvrun"
    truncated.write_bytes(data[: len(data) // 3])
    with pytest.raises(RecordError):
        r = open_run(truncated)
        r.steps()
        r.graph()
    tiny = tmp_path / "tiny.gvrun"
    tiny.write_bytes(data[:50])
    with pytest.raises(RecordError, match="truncated"):
        open_run(tiny)
    garbled = tmp_path / "garbled.gvrun"
    buf = bytearray(data)
    for i in range(4096, len(buf), 7):
        buf[i] = (buf[i] * 31 + 7) & 0xFF
    garbled.write_bytes(bytes(buf))
    with pytest.raises(RecordError):
        r = open_run(garbled)
        r.steps()
        r.graph()
        r.node_norms()

    newer = tmp_path / "newer.gvrun"
    newer.write_bytes(data)
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(RecordError, match="newer gradviz"):
        open_run(newer)

    for bad in (text, foreign, truncated, newer):
        proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(bad)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (bad, proc.stdout, proc.stderr)
        assert "gradviz runs:" in proc.stderr and "Traceback" not in proc.stderr


def test_opening_never_unpickles(tmp_path, monkeypatch):
    import pickle

    def boom(*a, **k):
        raise AssertionError("pickle used")
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "load", boom)
    path = _good_run(tmp_path / "p.gvrun", steps=12)
    with open_run(path) as r:
        r.steps()
        r.graph_at(10)
        assert json.loads(r._query("SELECT graph FROM graphs")[0][0])["nodes"]


# -- CLI ----------------------------------------------------------------------

def test_cli_runs_show(tmp_path):
    path = _good_run(tmp_path / "cli.gvrun", steps=30)
    proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    (rank,) = info["ranks"]
    assert rank["steps"] == 30 and rank["last_step"] == 29 and rank["node_steps"] == 3
    assert rank["grad_norm"]["max"] >= rank["grad_norm"]["min"] > 0
    codes = [f["code"] for f in info["findings"]]
    assert "run-no-gradient" in codes                    # the `unused` layer
    proc = subprocess.run([sys.executable, "-m", "gradviz", "runs", "show", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "30 steps" in proc.stdout and "unused.weight" in proc.stdout


# -- findings -----------------------------------------------------------------

def test_findings_from_a_record(tmp_path):
    model = Net()
    with torch.no_grad():
        model.fc1.weight.mul_(1e-9)             # fc1's gradient vanishes next to fc2's bias? no: scale below
    with watch(model, tmp_path / "f.gvrun", every=0) as w:
        for step in range(6):
            x, y = _data(step)
            model.zero_grad()
            out = model(x * 1e-8)               # tiny inputs: fc1.weight gradients ~1e-8 of the others
            scale = 1e7 if step == 3 else 1.0
            loss = nn.functional.cross_entropy(out, y) * scale
            if step == 4:
                loss = loss * float("nan")
            loss.backward()
            w.step(loss)
    with open_run(tmp_path / "f.gvrun") as r:
        found = {f.code: f for f in run_findings(load_run(r))}
    assert found["run-exploding"].data["first_step"] == 3
    assert found["run-first-nonfinite"].data["step"] == 4
    assert "fc1.weight" in found["run-first-nonfinite"].params
    assert found["run-no-gradient"].params == ["unused.weight", "unused.bias"]
    assert "fc1.weight" in found["run-vanishing"].params
    assert found["run-vanishing"].nodes == [f"param:{p}" for p in found["run-vanishing"].params]


# -- SIGKILL --------------------------------------------------------------------

_KILL_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {root!r})
from torch import nn
from gradviz.core.record import watch
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
w = watch(model, {path!r}, every=10)
last = None
step = 0
while True:
    model.zero_grad()
    loss = model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()
    w.step(loss)
    step += 1
    if w.committed_step != last:
        last = w.committed_step
        print(last, flush=True)
"""


def test_sigkill_leaves_a_readable_run(tmp_path):
    path = tmp_path / "killed.gvrun"
    script = tmp_path / "loop.py"
    script.write_text(_KILL_SCRIPT.format(root=str(ROOT), path=str(path)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    committed = -1
    try:
        for line in proc.stdout:
            committed = int(line)
            if committed >= 100:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert committed >= 100
    with open_run(path) as r:
        s = r.steps()
        assert s["step"][-1] >= committed
        assert s["step"].tolist() == list(range(len(s["step"])))
        assert r.meta["status"] == "running"
        assert r.node_steps()[:3] == [0, 10, 20]
        assert r.graph() is not None
        assert findings([load_run(r)]) == []


# -- memory -------------------------------------------------------------------

def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("steps", [
    3000,
    pytest.param(100_000, marks=pytest.mark.skipif(not os.environ.get("GRADVIZ_SLOW"),
                                                   reason="slow: set GRADVIZ_SLOW=1")),
])
def test_long_loop_does_not_grow_rss(tmp_path, steps, accel):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                 # a tiny model: thread hand-offs would dominate the time
    try:
        _long_loop(tmp_path, steps)
    finally:
        torch.set_num_threads(threads)


def _long_loop(tmp_path, steps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    warm = min(1000, steps // 3)
    with watch(model, tmp_path / "long.gvrun", every=10, optimizer=opt) as w:
        for step in range(steps):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()
            if step == warm:
                gc.collect()
                base = _rss_mb()
    gc.collect()
    grown = _rss_mb() - base
    assert grown < 25, f"RSS grew by {grown:.1f} MB over {steps - warm} steps"
    with open_run(tmp_path / "long.gvrun") as r:
        assert r.n_steps() == steps and len(r.node_steps()) == steps // 10


def test_a_bias_without_gradient_by_design_is_not_vanishing(tmp_path):
    """A bias that a batch-mean subtraction cancels gets exactly zero gradient: not an alarm."""
    torch.manual_seed(0)
    fc, head = nn.Linear(4, 8), nn.Linear(8, 3)
    model = nn.ModuleDict({"fc": fc, "head": head})
    with watch(model, tmp_path / "b.gvrun", every=0) as w:
        for step in range(5):
            model.zero_grad()
            h = fc(torch.randn(16, 4))
            h = h - h.mean(dim=0)                       # cancels fc.bias exactly
            nn.functional.cross_entropy(head(torch.tanh(h)), torch.randint(3, (16,))).backward()
            assert float(fc.bias.grad.abs().max()) < 1e-6
            w.step(1.0)
    with open_run(tmp_path / "b.gvrun") as r:
        codes = {f.code for f in run_findings(load_run(r))}
    assert "run-vanishing" not in codes


def test_two_watches_each_record_their_own_graph(tmp_path, accel):
    """Both taps are armed before either backward: each must take its own model's backward."""
    torch.manual_seed(0)
    a, b = Net(), nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    with watch(a, tmp_path / "a.gvrun", every=1) as wa, watch(b, tmp_path / "b.gvrun", every=1) as wb:
        for step in range(3):
            x, y = _data(step)
            a.zero_grad()
            b.zero_grad()
            loss_a = nn.functional.cross_entropy(a(x), y)
            loss_b = nn.functional.cross_entropy(b(x), y)
            loss_a.backward()                    # wb's tap is the outer one: it must let this through
            loss_b.backward()
            wa.step(loss_a)
            wb.step(loss_b)
    for path, model in ((tmp_path / "a.gvrun", a), (tmp_path / "b.gvrun", b)):
        with open_run(path) as r:
            assert r.node_steps() == [0, 1, 2]
            g = r.graph_at(0)
            params = {n for n in g.nodes if n.startswith("param:")}
            assert params == {f"param:{n}" for n, _ in model.named_parameters()}
            reached = {n for n in params if g.nodes[n]["reachable"] is not False}
            assert reached, path
            _, norms = r.node_norms(2)
            assert norms["loss"] == pytest.approx(1.0)


def test_many_rows_round_trip(tmp_path, accel):
    """Rows are inserted 50 per statement: 137 steps cover whole statements and a remainder,
    committed in several batches."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen = []
    with watch(model, tmp_path / "many.gvrun", every=0, optimizer=opt, commit_every=60) as w:
        for step in range(137):
            x, y = _data(step)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            if step == 70:
                loss = loss * float("nan")               # a NaN loss and NaN gradients are kept as NaN
            loss.backward()
            seen.append((loss.item(), [p.grad.norm().item() for p in model.parameters() if p.grad is not None],
                         opt.param_groups[0]["lr"]))
            w.step(loss)
            opt.step()
            if step == 70:
                with torch.no_grad():
                    for p in model.parameters():
                        p.nan_to_num_(0.0)
    with open_run(tmp_path / "many.gvrun") as r:
        s = r.steps()
        assert s["step"].tolist() == list(range(137))
        for i, (loss, grads, lr) in enumerate(seen):
            if i == 70:
                assert math.isnan(s["loss"][i]) and np.isnan(s["grad_norms"][i][:4]).all()
                continue
            assert s["loss"][i] == pytest.approx(loss, rel=1e-6)
            np.testing.assert_allclose(s["grad_norms"][i][:4], grads, rtol=1e-5)
            assert s["lr"][i] == pytest.approx(lr)


class _SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4, sparse=True)       # its gradient is a sparse COO tensor
        self.lin = nn.Linear(4, 1)

    def forward(self, idx):
        return self.lin(self.emb(idx)).sum()


def test_sparse_gradients_are_recorded(tmp_path, accel):
    torch.manual_seed(0)
    model = _SparseNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    with watch(model, tmp_path / "sparse.gvrun", every=1, optimizer=opt) as w:
        for step in range(3):
            opt.zero_grad()
            loss = model(torch.tensor([1, 2, 2, 7]))          # a repeated index: duplicates to sum
            loss.backward()
            assert model.emb.weight.grad.is_sparse
            seen.append([p.grad.to_dense().norm().item() for p in model.parameters()])
            w.step(loss)
            opt.step()
    with open_run(tmp_path / "sparse.gvrun") as r:
        np.testing.assert_allclose(r.steps()["grad_norms"], seen, rtol=1e-6)
        assert r.node_steps() == [0, 1, 2]
        _, norms = r.node_norms(2)
        assert norms["param:emb.weight"] == pytest.approx(seen[2][0], rel=1e-6)
        assert norms["loss"] == pytest.approx(1.0)


@pytest.mark.parametrize("order", ["step_first", "optimizer_first"])
def test_update_ratio_cadence_counts_steps_from_zero_in_either_order(tmp_path, order):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, tmp_path / "c.gvrun", every=0, optimizer=opt, update_ratio_every=3) as w:
        for step in range(10):
            x, y = _data(step)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if order == "step_first":
                w.step(loss)
                opt.step()
            else:
                opt.step()
                w.step(loss)
    with open_run(tmp_path / "c.gvrun") as r:
        measured = np.flatnonzero(np.isfinite(r.steps()["update_ratio"])).tolist()
    assert measured == [0, 3, 6, 9]
