"""Cost of ``gradviz.watch`` on an FSDP2 training step (2 CPU processes, gloo), in one run.

    python benchmarks/bench_fsdp.py                     # every=10 (goal <= 1.10x) and every=1
    python benchmarks/bench_fsdp.py --rounds 40 --block 10 --width 512

Each process holds three copies of the same model, each sharded with ``fully_shard`` per
``Linear`` and at the root (same initial weights, same batches): plain, recorded with
``watch(every=10, optimizer=opt)`` and with ``every=1`` (node norms every step). Each round
runs a block of steps of each copy in rotating order (the same order on both ranks: the
collectives must match); the printed ratio is the median over rounds of recorded-block time
/ plain-block time, with quartiles, by wall clock (a recorded step includes the collective
that sums the ranks' squared norms) and by this thread's CPU time.
"""
from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


def _model(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth - 2):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


class Variant:
    def __init__(self, name: str, base: nn.Module, every: int, tmp: str, rank: int) -> None:
        from torch.distributed.fsdp import fully_shard

        import gradviz

        self.name = name
        self.model = copy.deepcopy(base)
        for layer in self.model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(self.model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.w = gradviz.watch(self.model, Path(tmp) / f"{name}.gvrun", every=every, optimizer=self.opt) \
            if every else None
        g = torch.Generator().manual_seed(100 + rank)
        self.batches = [(torch.randn(64, 64, generator=g), torch.randint(10, (64,), generator=g)) for _ in range(8)]
        self.i = 0

    def steps(self, n: int) -> tuple[float, float]:
        model, opt, w = self.model, self.opt, self.w
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(n):
            x, y = self.batches[self.i % len(self.batches)]
            self.i += 1
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if w is not None:
                w.step(loss)
            opt.step()
        return time.perf_counter() - wall, time.thread_time() - cpu

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


def _worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ.setdefault("GRADVIZ_NATIVE", "0")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = _model(args.width, args.depth)
            variants = [Variant("plain", base, 0, tmp, rank), Variant("every10", base, 10, tmp, rank),
                        Variant("every1", base, 1, tmp, rank)]
            for v in variants:
                v.steps(max(3, args.block))                       # warm-up (lazy init, allocator)
            times: dict[str, list[tuple[float, float]]] = {v.name: [] for v in variants}
            for r in range(args.rounds):
                k = r % len(variants)
                for v in variants[k:] + variants[:k]:
                    times[v.name].append(v.steps(args.block))
            for v in variants:
                v.close()
        if rank == 0:
            Path(out).write_text(_report(times, args))
    finally:
        dist.destroy_process_group()


def _report(times: dict, args: argparse.Namespace) -> str:
    plain = times["plain"]
    wall_ms = statistics.median(t[0] for t in plain) / args.block * 1e3
    lines = [f"torch {torch.__version__}, 2 ranks (gloo, CPU, 1 thread each), MLP width {args.width} depth "
             f"{args.depth}, rounds={args.rounds} block={args.block}; plain FSDP2 step {wall_ms:.2f} ms"]
    for name in ("every10", "every1"):
        parts = []
        for i, clock in enumerate(("wall", "cpu")):
            ratios = sorted(t[i] / p[i] for t, p in zip(times[name], plain))
            parts.append(f"{clock} {statistics.median(ratios):.3f}x (quartiles {ratios[len(ratios) // 4]:.3f}-"
                         f"{ratios[3 * len(ratios) // 4]:.3f})")
        lines.append(f"watch {name.replace('every', 'every=')}: " + " | ".join(parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    args = ap.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "report.txt")
        mp.start_processes(_worker, args=(2, port, args, out), nprocs=2, join=True, start_method="spawn")
        print(Path(out).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
