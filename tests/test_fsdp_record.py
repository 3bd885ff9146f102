"""gradviz.watch on sharded models (#17): FSDP2 (``fully_shard``) and DTensor tensor parallelism, 2 CPU
processes with gloo, launched by ``torchrun``.

The oracle: the same model, unsharded, in one process, on the whole batch. Recorded per-parameter
gradient norms are those of the full gradients, the same on every rank. One ``torchrun`` of this file
(``__main__`` below) records every run the tests read, each in a folder of its own (processes cost
more than steps on a loaded 2-core machine; ``torch.multiprocessing.spawn`` is what
``tests/test_fsdp_graph.py`` and ``test_ddp.py`` use).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dist_harness import COLLECTIVE_TIMEOUT_S, FSDP2_ON_CPU, FSDP2_SKIP, RUN_TIMEOUT_S, available

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not available(), reason="torch.distributed with gloo is needed")
needs_fsdp2 = pytest.mark.skipif(not FSDP2_ON_CPU, reason=FSDP2_SKIP)
WORLD = 2
RTOL = 1e-5


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10 + step)
    return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((out - y) ** 2).mean()


def _record(model, path: Path, batches, every: int = 2, steps: int = 3) -> None:
    import gradviz

    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with gradviz.watch(model, path, every=every, optimizer=opt) as w:
        for step in range(steps):
            x, y = batches(step)
            opt.zero_grad()
            loss = _loss(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def _tokens() -> torch.Tensor:
    return torch.randint(64, (4, 12), generator=torch.Generator().manual_seed(3))


def _tp_model() -> nn.Module:
    """Column-wise ``0``, row-wise ``2``; the head ``3`` stays a plain (replicated) parameter."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.Linear(8, 4))


def _record_fsdp_mlp(rank: int, tmp: Path) -> None:
    from torch.distributed.fsdp import fully_shard

    model = _mlp()
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    half = 16 // WORLD

    def batches(step):                     # this rank's half of the batch (FSDP averages the halves)
        x, y = _data(step)
        return x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
    _record(model, tmp / "fsdp" / "run.gvrun", batches)


def _record_fsdp_gpt2(rank: int, tmp: Path) -> None:
    import gradviz
    from torch.distributed.fsdp import fully_shard

    model = _gpt2()
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    ids = _tokens()[rank * 2:(rank + 1) * 2]
    with gradviz.watch(model, tmp / "gpt2" / "run.gvrun", every=1) as w:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        w.step(loss)


def _record_tp(rank: int, tmp: Path, name: str, same_data: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    model = _tp_model()
    parallelize_module(model, init_device_mesh("cpu", (WORLD,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    # tensor parallelism wants the same batch on every rank; a data loader that is not told so gives
    # each rank its own, and the replicated head's gradients then differ between the ranks
    batches = _data if same_data else (lambda step: _data(step + 100 * rank))
    _record(model, tmp / name / "run.gvrun", batches, every=1, steps=2)


def _record_uneven(rank: int, tmp: Path) -> None:
    """Rank 1's steps cost more (a slow data loader): its own plan of the update-ratio cadence would
    differ from rank 0's, and the ranks' reductions would no longer pair up."""
    import time

    import gradviz
    from torch.distributed.fsdp import fully_shard

    model = _mlp()
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradviz.watch(model, tmp / "uneven" / "run.gvrun", every=0, optimizer=opt) as w:
        for step in range(64):
            x, y = _data(step % 4)
            if rank == 1:
                time.sleep(0.004)
            opt.zero_grad()
            loss = _loss(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()


def _worker(rank: int, tmp: Path) -> None:
    for name in ("fsdp", "gpt2", "tp", "tp_desync", "uneven"):
        (tmp / name).mkdir(exist_ok=True)
    if FSDP2_ON_CPU:
        _record_fsdp_mlp(rank, tmp)
        _record_fsdp_gpt2(rank, tmp)
        _record_uneven(rank, tmp)
    _record_tp(rank, tmp, "tp", same_data=True)
    _record_tp(rank, tmp, "tp_desync", same_data=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The runs recorded by one ``torchrun --nproc-per-node 2`` of this file."""
    tmp = tmp_path_factory.mktemp("fsdp_record")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1",
               GRADVIZ_NATIVE="0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
           __file__, str(tmp)]
    # a session of its own: on a timeout the launcher and its workers are killed together
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun still running after {RUN_TIMEOUT_S} s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-5000:]
    return tmp


def _reference_norms(model: nn.Module, loss: torch.Tensor) -> dict[str, float]:
    loss.backward()
    return {n: p.grad.norm().item() for n, p in model.named_parameters() if p.grad is not None}


def _open(path: Path):
    from gradviz.core.record import open_ranks

    readers = open_ranks(path)
    assert [r.rank for r in readers] == list(range(WORLD))
    return readers


def _runs_show(capsys, *args: str) -> str:
    from gradviz.cli.main import main

    capsys.readouterr()
    assert main(["runs", "show", *args]) == 0
    return capsys.readouterr().out


@needs_fsdp2
def test_fsdp2_mlp_records_full_gradient_norms_on_every_rank(runs):
    model = _mlp()
    x, y = _data(0)
    expect = _reference_norms(model, _loss(model(x), y))
    readers = _open(runs / "fsdp")
    try:
        for r in readers:
            assert r.param_names == list(expect)                # the user's names, no wrapper prefixes
            assert r.meta["norms"] == "sharded" and r.meta["world_size"] == WORLD
            np.testing.assert_allclose(r.steps()["grad_norms"][0], list(expect.values()), rtol=RTOL)
            shards = dict(zip(r.param_names, r.meta["param_shards"]))
            assert shards["0.weight"] == {"global_shape": [16, 8], "local_shape": [8, 8], "mesh": [2],
                                          "mesh_dims": None, "placements": ["Shard(0)"], "coordinate": [r.rank]}
            assert r.node_steps() == [0, 2]
            norms = r.node_norms(0)[1]
            for name, value in expect.items():
                assert norms[f"param:{name}"] == pytest.approx(value, rel=RTOL)
        s0, s1 = (r.steps() for r in readers)
        np.testing.assert_array_equal(s0["grad_norms"], s1["grad_norms"])    # one reduction: identical
        np.testing.assert_array_equal(s0["update_ratios"], s1["update_ratios"])
        assert not np.allclose(s0["loss"], s1["loss"])                       # each rank's own half
    finally:
        for r in readers:
            r.close()


@needs_fsdp2
def test_fsdp2_recorded_graph_names_ops_and_groups_communication(runs):
    readers = _open(runs / "fsdp")
    try:
        for r in readers:
            graph = r.graph()
            comm = {n: a for n, a in graph.nodes(data=True) if a.get("comm")}
            assert sorted(a["module"] for a in comm.values()) == ["2.[reduce-scatter]", "4.[reduce-scatter]"]
            assert all(a["label"] == "FSDP reduce-scatter" for a in comm.values())
            assert graph.graph["modules"]["2.[reduce-scatter]"]["type"] == "FSDP communication"
            linears = [a for _, a in graph.nodes(data=True) if a["kind"] == "op" and a["label"] == "addmm"]
            assert sorted(a["module"] for a in linears) == ["0", "2", "4"]
            assert all(a["location"].startswith(__file__ + ":") for a in linears)
            assert graph.nodes["param:0.weight"]["shard"]["placements"] == ["Shard(0)"]
            assert graph.nodes["param:0.weight"]["shape"] == [16, 8]
    finally:
        for r in readers:
            r.close()


@needs_fsdp2
def test_runs_show_prints_the_shard_layout_and_opens_a_folder(runs, capsys):
    info = json.loads(_runs_show(capsys, str(runs / "fsdp"), "--json"))
    assert info["findings"] == []                                            # the ranks agree
    assert [r["shards"]["2.weight"]["local_shape"] for r in info["ranks"]] == [[8, 16], [8, 16]]
    assert [r["norms"] for r in info["ranks"]] == ["sharded", "sharded"]
    text = _runs_show(capsys, str(runs / "fsdp" / "run.rank1.gvrun"))          # one file: the whole run
    assert "rank 1 of 2" in text
    assert "  2.weight: 16x16 Shard(0) on mesh 2; local 0: 8x16, 1: 8x16" in text.splitlines()


@needs_fsdp2
def test_fsdp2_transformer_records_full_gradient_norms(runs):
    model = _gpt2()
    ids = _tokens()
    expect = _reference_norms(model, model(input_ids=ids, labels=ids).loss)
    readers = _open(runs / "gpt2")
    try:
        for r in readers:
            assert r.param_names == list(expect)
            np.testing.assert_allclose(r.steps()["grad_norms"][0], list(expect.values()), rtol=RTOL)
            graph = r.graph()
            groups = {a["module"] for _, a in graph.nodes(data=True) if a.get("comm")}
            assert {"transformer.h.0.[reduce-scatter]", "transformer.h.1.[reduce-scatter]"} <= groups
    finally:
        for r in readers:
            r.close()


def test_tensor_parallel_records_full_gradient_and_node_norms(runs, capsys):
    model = _tp_model()
    x, y = _data(0)
    seen = {}
    hidden = model[0](x)
    hidden.register_hook(lambda g: seen.update(hidden=g.norm().item()))
    expect = _reference_norms(model, _loss(model[3](model[2](model[1](hidden))), y))
    readers = _open(runs / "tp")
    try:
        for r in readers:
            np.testing.assert_allclose(r.steps()["grad_norms"][0], list(expect.values()), rtol=RTOL)
            placements = [lay and lay["placements"] for lay in r.meta["param_shards"]]
            assert placements == [["Shard(0)"], ["Shard(0)"], ["Shard(1)"], ["Replicate()"], None, None]
            graph, norms = r.graph(), r.node_norms(0)[1]
            labels = {a["label"] for _, a in graph.nodes(data=True) if a.get("comm")}
            assert {"redistribute", "to local tensor", "to DTensor"} <= labels
            # the first layer's output gradient is a DTensor sharded over the ranks: its full norm
            (first,) = [n for n, a in graph.nodes(data=True) if a["label"] == "addmm" and a["module"] == "0"]
            assert norms[first] == pytest.approx(seen["hidden"], rel=RTOL)
    finally:
        for r in readers:
            r.close()
    assert json.loads(_runs_show(capsys, str(runs / "tp"), "--json"))["findings"] == []


def test_a_rank_that_disagrees_is_a_finding(runs, capsys):
    """Each rank fed its own batch under tensor parallelism: the sharded layers' norms still agree
    (one reduction), the replicated plain head's do not -- the finding names it."""
    info = json.loads(_runs_show(capsys, str(runs / "tp_desync"), "--json"))
    (finding,) = [f for f in info["findings"] if f["code"] == "ranks-desync"]
    assert finding["severity"] == "error"
    assert set(finding["params"]) == {"3.weight", "3.bias"}
    readers = _open(runs / "tp_desync")
    try:
        s0, s1 = (r.steps()["grad_norms"] for r in readers)
        np.testing.assert_array_equal(s0[:, :4], s1[:, :4])               # sharded: reduced together
        assert not np.allclose(s0[:, 4:], s1[:, 4:])
    finally:
        for r in readers:
            r.close()


def test_the_run_view_shows_the_shard_layout_and_the_disagreeing_ranks(runs, window):
    """The app's run view on the folder of a sharded run: one run of 2 ranks, its layout, the finding."""
    from gradviz.app import runs as runs_ext
    from gradviz.app.runs import open_run_file

    panel = window.run_panel = runs_ext.install(window)
    try:
        assert open_run_file(window, panel, runs / "tp_desync")
        assert window.document.kind == "run" and panel.ranks == [0, 1]
        assert "4 sharded parameters" in panel.title.text()
        layout = panel.title.toolTip().splitlines()
        assert "  0.weight: 16x8 Shard(0) on mesh 2; local 0: 8x8, 1: 8x8" in layout
        assert "  2.bias: 8 Replicate() on mesh 2; local 0: 8, 1: 8" in layout
        (finding,) = [f for f in panel.findings if f["code"] == "ranks-desync"]
        assert finding["params"][:2] in (["3.weight", "3.bias"], ["3.bias", "3.weight"])
        texts = [panel.finding_list.item(i).text() for i in range(panel.finding_list.count())]
        assert any("Ranks disagree" in t for t in texts)
    finally:
        panel.shutdown()


@needs_fsdp2
def test_ranks_measure_update_ratios_on_the_same_steps(runs):
    readers = _open(runs / "uneven")
    try:
        measured = [~np.isnan(r.steps()["update_ratios"]).all(axis=1) for r in readers]
        np.testing.assert_array_equal(measured[0], measured[1])
        assert measured[0][:10].all() and not measured[0][10:].all()     # every step, then on a cadence
        s0, s1 = (r.steps() for r in readers)
        np.testing.assert_array_equal(s0["update_ratios"], s1["update_ratios"])
    finally:
        for r in readers:
            r.close()


def test_torchrun_writes_one_file_per_rank_and_the_folder_opens_as_one_run(runs):
    assert sorted(p.name for p in (runs / "tp").iterdir()) == ["run.rank0.gvrun", "run.rank1.gvrun"]
    readers = _open(runs / "tp")                                 # the folder: one run
    try:
        assert [r.meta["local_rank"] for r in readers] == [0, 1]        # torchrun's LOCAL_RANK
        assert [(r.meta["node"], r.meta["nodes"]) for r in readers] == [(0, 1), (0, 1)]
    finally:
        for r in readers:
            r.close()


# -- rank files: names, folders, the environment ---------------------------------------

def test_rank_file_names_carry_the_node_when_the_world_spans_hosts(tmp_path):
    from gradviz.core.record.schema import rank_files, rank_path

    assert rank_path(tmp_path / "run.gvrun", 0, 1) == tmp_path / "run.gvrun"
    assert rank_path(tmp_path / "run.gvrun", 3, 4) == tmp_path / "run.rank3.gvrun"
    assert rank_path(tmp_path / "run.gvrun", 5, 8, node=1, n_nodes=2) == tmp_path / "run.node1.rank5.gvrun"
    assert rank_path(tmp_path / "n{node}-r{rank}.gvrun", 5, 8, node=1, n_nodes=2) == tmp_path / "n1-r5.gvrun"
    for name in ("run.node0.rank0.gvrun", "run.node0.rank1.gvrun", "run.node1.rank2.gvrun", "run.node1.rank3.gvrun"):
        (tmp_path / name).write_bytes(b"")
    files = [p.name for p in rank_files(tmp_path / "run.node1.rank2.gvrun")]
    assert files == ["run.node0.rank0.gvrun", "run.node0.rank1.gvrun", "run.node1.rank2.gvrun",
                     "run.node1.rank3.gvrun"]
    assert [p.name for p in rank_files(tmp_path)] == files                  # the folder holds one run


def test_a_folder_holding_several_runs_or_none_says_so(tmp_path):
    from gradviz.core.record import RecordError
    from gradviz.core.record.schema import rank_files

    with pytest.raises(RecordError, match="no run files"):
        rank_files(tmp_path)
    (tmp_path / "a.rank0.gvrun").write_bytes(b"")
    (tmp_path / "b.gvrun").write_bytes(b"")
    with pytest.raises(RecordError, match="holds 2 runs"):
        rank_files(tmp_path)


def test_rank_world_and_node_from_torchrun_and_slurm_environments(monkeypatch):
    from gradviz.core.record.ddp import dist_info, node_info

    for var in ("RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "SLURM_NODEID", "SLURM_NNODES"):
        monkeypatch.delenv(var, raising=False)
    assert dist_info() == (0, 1) and node_info() == (0, 1)
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    assert dist_info() == (5, 8) and node_info() == (1, 2)
    for var in ("GROUP_RANK", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("SLURM_NODEID", "3")
    monkeypatch.setenv("SLURM_NNODES", "4")
    assert node_info() == (3, 4)
    monkeypatch.setenv("RANK", "9")                                   # out of range: not trusted
    assert dist_info() == (0, 1)


if __name__ == "__main__":          # the workers of the ``runs`` fixture, started by torchrun
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        _worker(dist.get_rank(), Path(sys.argv[1]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
