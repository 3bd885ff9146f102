"""Run a function on N CPU processes joined by gloo, robustly (for tests/test_fsdp*.py and test_tp*.py).

``run_ranks(fn, tmp_path, *args)`` spawns ``world`` processes that each call ``fn(rank, world,
tmp_path, *args)`` inside an initialised process group and return nothing (results go to files
under ``tmp_path``). Made for a loaded 2-core machine shared with other test runs:

* the rendezvous is a file in ``tmp_path`` (no TCP port to race for);
* every collective times out (``COLLECTIVE_TIMEOUT_S``) instead of waiting forever, and the whole
  run has a deadline after which every child is killed;
* a child that raises fails the test with its traceback and the others are killed;
* ranks meet at a barrier before the process group is destroyed, which is always done (a rank
  that tears down its group while the other still talks to it aborts gloo with SIGABRT).
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent
COLLECTIVE_TIMEOUT_S = 240
RUN_TIMEOUT_S = 420


def available() -> bool:
    return dist.is_available() and dist.is_gloo_available()


# FSDP2's forward records an event on the device's current stream; torch 2.6's CPU stream has no
# record_event (AttributeError inside fully_shard's all-gather), so FSDP2 runs on CPU only on newer torches
FSDP2_ON_CPU = hasattr(torch, "cpu") and hasattr(torch.cpu.current_stream(), "record_event")
FSDP2_SKIP = f"FSDP2 does not run on CPU with torch {torch.__version__} (its CPU stream has no record_event)"


def _entry(rank: int, world: int, store: str, fn, tmp: str, args: tuple) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("GRADVIZ_NATIVE", "0")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        fn(rank, world, Path(tmp), *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(fn, tmp_path: Path, *args, world: int = 2, timeout: float = RUN_TIMEOUT_S) -> None:
    """Run ``fn(rank, world, tmp_path, *args)`` on ``world`` gloo processes; raise if any fails or
    the run outlives ``timeout`` seconds (the children are killed either way)."""
    store = tmp_path / f"store-{time.monotonic_ns()}"
    ctx = mp.start_processes(_entry, args=(world, str(store), fn, str(tmp_path), args), nprocs=world,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=2):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world} ranks still running after {timeout:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(10)


def load_module(path: Path):
    """A test script imported as a module of its own (its ``unsharded()`` builds the reference model)."""
    spec = importlib.util.spec_from_file_location(f"dist_script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
