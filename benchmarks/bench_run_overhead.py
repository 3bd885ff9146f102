"""Cost of ``gradviz run``'s recording (and of the loop doctor in ``watch``) on a healthy loop, in one process.

    python benchmarks/bench_run_overhead.py                 # digits-sized MLP, batch 64, 15 rounds
    python benchmarks/bench_run_overhead.py --rounds 30 --block 100 --clock wall

Variants, each round in rotating order, each a block of ``--block`` timed steps of the same loop
(zero_grad, forward, cross-entropy, backward, SGD-momentum step) on the same batches:

* ``plain``: the loop alone;
* ``run``: under ``ScriptRecorder`` as ``gradviz run --every 10`` installs it (global module hooks until
  the model is found, the global optimizer post-hook that calls ``w.step``, the backward tap on every
  backward for the loss, the loop doctor) -- started before the block and warmed by 100 untimed steps
  (the first steps, where the model is found and the doctor checks 0-2, are start-up, not the loop);
* ``watch``: ``gradviz.watch(model, path, every=10, optimizer=opt)`` (loop doctor on, the default);
* ``watch-noloop``: the same with ``loop=False`` (what the doctor adds to ``watch``);
* ``floor``: the plain loop plus the least any per-step recorder of gradient norms does: every parameter's
  gradient norm each step (one ``torch._foreach_norm``) brought to Python as a list -- no file, no doctor.
  On a model whose step is a fraction of a millisecond this alone can exceed the 1.05x target; it is the
  floor ``run`` is judged against there.

The printed ratio is the median over rounds of variant-block time / plain-block time, with quartiles.
Target (#26): ``run`` <= 1.05x at --every 10. ``--clock cpu`` (default): this thread's CPU time, robust on
a shared machine (the background commit thread is not counted, as in bench_record.py).

#26, first measurement (2026-12-02, torch 2.13 CPU, one thread, 15 rounds x 100 steps, a 2-core machine
shared by seven sessions: bench_record.py's own every=10 read 1.175x there, against 1.02-1.04x quiet):
plain step 0.61-0.72 ms; run 1.47-1.50x, watch (loop doctor on) 1.45-1.52x, watch-noloop 1.29-1.35x,
quartiles +-0.2-0.3 (30 warm-up steps); with 100 warm-up steps (past the update-ratio cadence's first
re-plan), 12 rounds x 200 steps: plain 0.46 ms, run 1.44x, watch 1.35x, watch-noloop 1.23x. The 1.05x target is NOT shown by these numbers: they need a quiet machine, and the
doctor's share (watch vs watch-noloop, ~0.15x here) is the part to bring down.

#26 overhead pass (2026-12-02, same machine, still shared: another session's test suite ran; --clock cpu),
the tree before it (57d4f98) and after, alternately, two runs each; tiny / digits medians, run, watch,
watch-noloop: before 1.288/1.239, 1.235/1.172, 1.174/1.208 and 1.227/1.214, 1.248/1.284, 1.168/1.145, then
(quieter) 1.233/1.195, 1.176/1.155, 1.110/1.108 and 1.304/1.178, 1.219/1.097, 1.179/1.153; after 1.237/1.192,
1.157/1.147, 1.149/1.095 and 1.273/1.152, 1.261/1.156, 1.164/1.113, then 1.246/1.164, 1.228/1.150,
1.144/1.102 and 1.190/1.196, 1.109/1.156, 1.063/1.105. Quartiles +-0.05-0.3: the medians move by more
between runs than between trees. Per-step medians (2000 steps, by step position, min of 3; tiny model)
read the difference: watch - watch-noloop 35, 30 us -> 27, 16 us per step; run - watch-noloop 59, 47 ->
39, 24 us; watch-noloop itself (watch's own work, not the doctor's) 1.19-1.26x the 0.375 ms plain step --
so the 1.05x target for run cannot be met on this model by the doctor alone, and is not shown.

#26 ordinary-step pass (2026-12-04, same 2-core machine, heavily shared: plain steps read 0.40-0.48 ms in
this script where 0.378 ms quiet), main (a565ba5) and the h-overhead tree alternately, three runs each,
--rounds 15 --block 60 --clock cpu, medians (quartiles): main run 1.308x (1.247-1.425), 1.306x
(1.280-1.368), 1.353x (1.108-1.488); after 1.351x (1.255-1.827), 1.286x (1.233-1.371), 1.315x
(1.146-1.604); floor in the same runs 1.037-1.118x. The change (~4-5 us a step) is far inside that noise.
What reads it: benchmarks/bench_run_parts.py's in-loop timers (same machine, 2,000 steps, unchecked
positions, main vs after, two runs each): the tap + the doctor's backward minus torch's backward 16.3, 12.7
-> 12.5, 10.1 us; doctor pre+post hooks 11.7, 9.4 -> 10.2, 8.3 us; step_loss 5.3, 4.2 -> 3.1, 2.7 us; and
called alone in a tight loop (min of 7 x 20,000): tap + doctor backward with a no-op backward 4.70-4.76 ->
4.01-4.41 us, doctor pre+post 2.31-2.40 -> 2.08-2.25 us, step_loss 0.90-1.46 -> 0.39-0.41 us. Where the
rest goes (bench_run_parts.py, unchecked steps, +75-90 us over a 0.38-0.40 ms plain step): the gradient-norm
read 22 us in the loop (11.5 us alone, the floor's foreach_norm + tolist 13.4 us alone: at the floor), the
rest of w.step ~8 us, the doctor's hooks ~8 us, the tap ~10 us, the watch's hooks ~3 us -- ~50 us of
direct cost -- and ~25 us that no gradviz code runs in: the same phases timed apart (zero_grad, forward,
backward, optimizer step) read +3, +9 and (beyond the tap) +5 us over plain, with no hook installed on
those steps (checked: no global or module hook, no saved-tensor hook, no function mode): caches and branch
predictors refilled after ~20 Python calls a step. Not garbage collection (gc.disable() changes nothing),
not the buffered rows (clearing them every step changes nothing). Without the native accelerator (not
built on this machine) the cycle's sampled step 0 costs +330-440 us and the checked step 1 +200-240 us
(bench_loop_steps.py): ~40 us a step averaged over the cycle, on top of the ordinary steps'. The 1.05x
target is NOT met on this model; the ordinary step's direct work is ~3x the floor's.
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
ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from gradviz.core.record.recorder import watch  # noqa: E402
from gradviz.core.record.script_recorder import ScriptRecorder  # noqa: E402

WARM = 100


MODEL = {"name": "tiny"}


def make():
    torch.manual_seed(0)
    if MODEL["name"] == "digits":      # bench_record.py's MLP: samples/mlp_digits.py, its data and its Adam
        from gradviz.core.script.load import load_script
        mlp = MODEL.get("script") or MODEL.setdefault("script", load_script(ROOT / "samples" / "mlp_digits.py"))
        model = mlp.new_model()
        batches = [(inputs[0], targets) for inputs, targets in (mlp.get_batch(i) for i in range(16))]
        return model, mlp.make_optimizer(model.parameters()), batches
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(16)]
    return model, opt, batches


def loop(model, opt, batches, n, clock, on_step=None) -> float:
    t0 = clock()
    for i in range(n):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if on_step is not None:
            on_step(loss)
        opt.step()
    return clock() - t0


def block(variant: str, n: int, tmp: str, k: int, clock) -> float:
    model, opt, batches = make()
    path = os.path.join(tmp, f"{variant}{k}.gvrun")
    if variant == "plain":
        return loop(model, opt, batches, n, clock)
    if variant == "floor":
        params = [p for p in model.parameters() if p.requires_grad]

        def norms(loss) -> None:
            torch.stack(torch._foreach_norm([p.grad for p in params])).tolist()
        loop(model, opt, batches, WARM, clock, norms)
        return loop(model, opt, batches, n, clock, norms)
    if variant == "run":
        rec = ScriptRecorder(path, every=10)
        rec.start()
        try:
            loop(model, opt, batches, WARM, clock)
            return loop(model, opt, batches, n, clock)
        finally:
            rec.finish()
    w = watch(model, path, every=10, optimizer=opt, loop=variant == "watch")
    try:
        loop(model, opt, batches, WARM, clock, w.step)
        return loop(model, opt, batches, n, clock, w.step)
    finally:
        w.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=60)
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--model", choices=["tiny", "digits"], default="tiny",
                    help="tiny: a 0.4 ms MLP on random data; digits: bench_record.py's digits MLP (the watch budget's)")
    a = ap.parse_args(argv)
    MODEL["name"] = a.model
    clock = time.thread_time if a.clock == "cpu" else time.perf_counter
    variants = ["plain", "run", "watch", "watch-noloop", "floor"]
    times = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for v in variants:                       # warm-up: imports, allocator, first files
            block(v, 10, tmp, -1, clock)
        for r in range(a.rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for v in order:
                times[v].append(block(v, a.block, tmp, r, clock))
    plain = times["plain"]
    print(f"torch {torch.__version__}, model {a.model}, {a.rounds} rounds x {a.block} steps, clock {a.clock}; plain step "
          f"{1e3 * statistics.median(plain) / a.block:.3f} ms")
    for v in variants[1:]:
        ratios = sorted(t / p for t, p in zip(times[v], plain))
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        print(f"  {v:13s} {statistics.median(ratios):.3f}x  (quartiles {q1:.3f}-{q3:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
