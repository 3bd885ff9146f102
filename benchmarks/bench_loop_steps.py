"""Where ``gradviz run``'s cost falls in the loop: per-step times by the step's place in the ``--every`` cycle.

    python benchmarks/bench_loop_steps.py                  # tiny MLP, 2,000 steps, every 10, min of 3 runs

The loop doctor's checks (and, since #26, the saved-tensor count) run on chosen steps only: 0-2, each
multiple of ``every`` and the step after (the saved-tensor window: steps 1, 2 and every ``every``-th + 1).
The mean per-step time over all steps hides which step pays; this prints, for ``plain`` (the loop alone)
``run`` (under ``ScriptRecorder`` as ``gradviz run --every 10`` installs it) and ``run-nosaved`` (the same
with the saved-tensor count switched off: what #26's count adds), the median step time of the steps at each
position ``step % every`` (after 100 warm-up steps; the best of ``--repeat`` interleaved runs), and the
excess over ``plain`` at that position, all measured in this run.

#26, the saved-tensor count (2026-12-04, torch 2.13 CPU, one thread, a 2-core machine shared with two other
sessions; tiny MLP, plain step 0.378 ms, --repeat 5): the checked step 1 of each cycle (the count's window)
run +231.5 us over plain, run-nosaved +175.3 us: the count costs ~56 us there (11 saved tensors), ~5.6 us a
step averaged over the cycle (1.5 %); the unchecked positions 3-9: run +73.8-81.7 us, run-nosaved
+76.1-89.7 us: no rise. (Before the slots were finalised by ``__del__`` instead of a weak reference each:
+275.6 vs +156.6 us, ~119 us.) On the same machine under load: +326.1 vs +234.5 us.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gradviz.core.record.script_recorder import ScriptRecorder  # noqa: E402

WARM = 100


def steps(n: int, recorder_path: str | None, every: int, saved: bool = True) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(16)]
    rec = ScriptRecorder(recorder_path, every=every) if recorder_path else None
    if rec is not None:
        kept = getattr(rec.doctor, "_kept", None)      # (a tree before #26's count has none: both read the same)
        if kept is not None:
            kept.saved.available = saved
        rec.start()
    times = []
    try:
        for i in range(WARM + n):
            x, y = batches[i % len(batches)]
            t0 = time.thread_time()
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            times.append(time.thread_time() - t0)
    finally:
        if rec is not None:
            rec.finish()
    return times[WARM:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    by = {"plain": [], "run": [], "run-nosaved": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeat):
            by["plain"].append(steps(a.steps, None, a.every))
            by["run"].append(steps(a.steps, os.path.join(tmp, f"r{r}.gvrun"), a.every))
            by["run-nosaved"].append(steps(a.steps, os.path.join(tmp, f"n{r}.gvrun"), a.every, saved=False))

    def median_at(variant: str, pos: int) -> float:
        # steps are numbered from WARM, a multiple of 10: position = step index % every
        return min(statistics.median(t[i] for i in range(pos, len(t), a.every)) for t in by[variant])
    plain_all = min(statistics.median(t) for t in by["plain"])
    print(f"torch {torch.__version__}, {a.steps} steps x {a.repeat}, every {a.every}, thread CPU time; "
          f"plain step {1e3 * plain_all:.3f} ms")
    print("  pos   plain us    run us  nosaved us   run excess  nosaved excess  (us over plain)")
    for pos in range(a.every):
        p, r, n = median_at("plain", pos), median_at("run", pos), median_at("run-nosaved", pos)
        print(f"  {pos:3d} {1e6 * p:10.1f} {1e6 * r:9.1f} {1e6 * n:11.1f} {1e6 * (r - p):12.1f} {1e6 * (n - p):15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
