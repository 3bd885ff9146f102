"""gradviz.watch under DistributedDataParallel: 2 CPU processes, gloo backend."""
from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)
        self.side = nn.Linear(4, 2)          # used on rank 0 only in the "skip" variant

    def forward(self, x, use_side=True):
        y = self.b(torch.relu(self.a(x)))
        if use_side:
            y = y + self.side(x)
        return y


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, path: str, skip: bool, out: str, accel: str = "python") -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["GRADVIZ_NATIVE"] = "auto" if accel == "native" else "0"     # (built by the test first)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        import gradviz.core.record as record
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(0)
        model = Tiny()
        ddp = DDP(model, find_unused_parameters=skip)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + rank)      # different data on each rank
        norms = []
        with record.watch(ddp, path, every=2, optimizer=opt) as w:
            for step in range(6):
                x = torch.randn(5, 4, generator=g)
                opt.zero_grad()
                loss = ddp(x, use_side=not (skip and rank == 1)).pow(2).mean()
                loss.backward()
                norms.append([(-1.0 if p.grad is None else p.grad.norm().item()) for p in model.parameters()])
                w.step(loss)
                opt.step()
            native_hooks = -1 if w.nodes.native is None else w.nodes.native.hooks_placed
        np.save(out.format(rank=rank), np.array(norms))
        Path(out.format(rank=rank) + ".native").write_text(str(native_hooks))
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path: Path, skip: bool, accel: str = "python") -> Path:
    path = tmp_path / "run.gvrun"
    out = str(tmp_path / "norms{rank}.npy")
    mp.start_processes(_worker, args=(2, _free_port(), str(path), skip, out, accel), nprocs=2, join=True,
                       start_method="spawn")
    return path


def test_ddp_two_ranks(tmp_path, accel):
    from gradviz.core.record import open_ranks, rank_files
    from gradviz.core.record.analysis_ranks import rank_findings
    from gradviz.core.record.loading import load_runs

    path = _spawn(tmp_path, skip=False, accel=accel)
    for r in (0, 1):                 # steps 2 and 4 repeat step 0's structure: native hooks then
        hooks = int((tmp_path / f"norms{r}.npy.native").read_text())
        assert hooks == (2 if accel == "native" else -1)
    files = rank_files(path)
    assert [f.name for f in files] == ["run.rank0.gvrun", "run.rank1.gvrun"]
    readers = open_ranks(path)
    try:
        assert [r.rank for r in readers] == [0, 1]
        assert all(r.world_size == 2 for r in readers)
        assert readers[0].param_names == ["a.weight", "a.bias", "b.weight", "b.bias", "side.weight", "side.bias"]
        s0, s1 = readers[0].steps(), readers[1].steps()
        assert len(s0["step"]) == len(s1["step"]) == 6
        # what the loop saw with torch, after the all-reduce
        for r, s in ((0, s0), (1, s1)):
            seen = np.load(tmp_path / f"norms{r}.npy")
            np.testing.assert_allclose(s["grad_norms"], seen, rtol=1e-6)
        # same gradients on both ranks (different data, all-reduced)
        np.testing.assert_allclose(s0["grad_norms"], s1["grad_norms"], rtol=1e-5)
        np.testing.assert_allclose(s0["grad_norm"], s1["grad_norm"], rtol=1e-5)
        assert not np.allclose(s0["loss"], s1["loss"])          # local losses differ
        assert readers[0].node_steps() == [0, 2, 4]
        assert rank_findings(load_runs(readers)) == []
    finally:
        for r in readers:
            r.close()


def test_ddp_unused_parameter_named(tmp_path):
    from gradviz.core.record import open_ranks
    from gradviz.core.record.analysis_ranks import rank_findings
    from gradviz.core.record.loading import load_runs

    path = _spawn(tmp_path, skip=True)
    readers = open_ranks(path)
    try:
        found = rank_findings(load_runs(readers))
        codes = [f.code for f in found]
        assert "ranks-unused-param" in codes, found
        f = found[codes.index("ranks-unused-param")]
        assert f.params == ["side.weight", "side.bias"]
        assert f.data["params"]["side.weight"]["ranks"] == [1]
        assert "side.weight" in f.message
    finally:
        for r in readers:
            r.close()
