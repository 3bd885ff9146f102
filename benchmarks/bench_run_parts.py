"""Where ``gradviz run``'s ordinary steps spend their time: each per-step entry point, timed in the loop.

    python benchmarks/bench_run_parts.py                  # tiny MLP (bench_run_overhead.py's), 2,000 steps

The recorder's per-step entry points (the backward tap and the doctor's backward, the doctor's optimizer
hooks, the watch's hooks and ``w.step`` with its gradient-norm read, ``gradviz run``'s post-hook) are wrapped
in a ``perf_counter_ns`` timer (inclusive; the wrappers add ~0.1 us each); the medians over the unchecked
steps (positions 3-9 of the --every 10 cycle, after 100 warm-up steps) are printed beside the median plain
step and the median ``run`` step of the same run, as a share of the plain step. Timed inside the loop, a
part costs 2-3x what it costs called alone in a tight loop (caches and branch predictors are the model's
kernels' between calls): what matters is the sum against ``run - plain``, and which part shrinks.
"""
from __future__ import annotations

import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
ROOT = Path(__file__).resolve().parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT.parent))
    sys.path.insert(0, str(ROOT))

import bench_run_overhead as bench  # noqa: E402
from gradviz.core.loop import doctor  # noqa: E402
from gradviz.core.record import recorder, script_recorder  # noqa: E402
from gradviz.core.runtime import process_patches  # noqa: E402
from gradviz.core.stats import steps  # noqa: E402

WARM = 100
_ns = time.perf_counter_ns
PARTS: dict[str, list[tuple[int, int]]] = {}
STEP = {"i": 0}


def _timed(owner, name: str, label: str) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t0 = _ns()
        try:
            return f(*args, **kwargs)
        finally:
            PARTS.setdefault(label, []).append((STEP["i"], _ns() - t0))
    setattr(owner, name, wrapper)


def instrument() -> None:
    for owner, name, label in (
            (script_recorder.ScriptRecorder, "_after_step", "run's post-hook (incl. w.step)"),
            (recorder.Watch, "step", "w.step"), (recorder.Watch, "_read_grads", "  gradient read"),
            (steps.StepStats, "grads_ready", "    norms (StepStats.grads_ready)"),
            (recorder, "step_loss", "  step_loss"), (recorder.Watch, "_opt_pre", "watch pre-hook"),
            (recorder.Watch, "_opt_post", "watch post-hook"), (doctor.LoopDoctor, "_pre", "doctor pre-hook"),
            (doctor.LoopDoctor, "_post", "doctor post-hook")):
        _timed(owner, name, label)
    handler = process_patches._tap["handler"]

    def tapped(original, tensors, args, kwargs):
        def torch_backward(*a, **k):
            t = _ns()
            try:
                return original(*a, **k)
            finally:
                PARTS.setdefault("(torch's backward)", []).append((STEP["i"], _ns() - t))
        t0 = _ns()
        try:
            return handler(torch_backward, tensors, args, kwargs)
        finally:
            PARTS.setdefault("tap + doctor backward (incl. torch's)", []).append((STEP["i"], _ns() - t0))
    process_patches._tap["handler"] = tapped


def steps_of(n: int, recorded: bool) -> list[tuple[int, int]]:
    model, opt, batches = bench.make()
    rec = script_recorder.ScriptRecorder(os.path.join(tempfile.mkdtemp(), "parts.gvrun"), every=10) if recorded else None
    if rec is not None:
        rec.start()
    out = []
    try:
        for i in range(WARM + n):
            STEP["i"] = i if recorded else -1
            x, y = batches[i % len(batches)]
            t0 = _ns()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            out.append((i, _ns() - t0))
    finally:
        if rec is not None:
            rec.finish()
    return out


def unchecked_median(samples: list[tuple[int, int]]) -> float:
    values = [d for i, d in samples if i >= WARM and i % 10 >= 3]
    return statistics.median(values) / 1e3 if values else float("nan")


def main(argv=None) -> int:
    n = int((argv or sys.argv[1:] or ["2000"])[0])
    instrument()
    plain = unchecked_median(steps_of(n, False))
    run = unchecked_median(steps_of(n, True))
    print(f"torch {torch.__version__}, {n} steps, unchecked positions 3-9 of every 10; plain step {plain:.1f} us, "
          f"run step {run:.1f} us (+{run - plain:.1f} us, {run / plain:.3f}x)")
    for label, samples in PARTS.items():
        m = unchecked_median(samples)
        print(f"  {label:40s} {m:7.1f} us  {100 * m / plain:5.1f} % of plain")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
