"""Cost of ``gradviz.watch`` on a training step, interleaved with a plain loop in one process.

    python benchmarks/bench_record.py                  # digits MLP (batch 64) and a 12-block GPT
    python benchmarks/bench_record.py --rounds 60 --block 20
    GRADVIZ_NATIVE=0 python benchmarks/bench_record.py # without the native accelerator
    python benchmarks/bench_record.py --profile gpt    # cProfile of recorded every=1 steps
    python benchmarks/bench_record.py --rss 100000     # RSS of a long recorded loop on a tiny model

Four copies of each model (same initial weights, same batches) train side by side:
plain, recorded with ``every=10`` (with ``optimizer=``: update ratios), the minimal call
``watch(model, path, every=10)`` without ``optimizer=``, and recorded with ``every=1`` (node
norms every step). Each round runs a block of steps of each variant, in rotating order; the
printed ratio is the median over rounds of recorded-block time / plain-block time, with its
quartiles (this machine is shared: single rounds vary by a few per cent).
Targets: every=10 <= 1.05x, every=1 <= 1.15x. The first line says whether the native
accelerator (``gradviz.core.native``) is in use.

#18 before/after (2026-12-01, torch 2.13, native loaded, --clock cpu, this script run on the
tree before the hot-path rewrite, 065a6b0, and on main, alternately; a 2-core machine at load
10-13, so rounds vary by +-10 %): MLP medians of 3 runs, every=10 1.095x -> 1.044x, the minimal
call without optimizer= 1.050x -> 1.026x, every=1 1.113x -> 1.087x; GPT-12 one run each, every=10
1.013x -> 1.000x, without optimizer= 1.034x -> 1.034x, every=1 1.052x -> 1.038x.

#24 part B before/after (2026-12-02, torch 2.13, native not built in that venv, --clock cpu, main's
tree and the branch alternately, a 2-core machine at load 7-8: plain MLP steps 2.7 ms, quartiles
+-10 %): the faults' checks (a loss's type, the writer's failure, the model's registration flag)
cost nothing measurable. MLP, two runs each, main -> branch: every=10 1.114x, 1.160x -> 1.150x,
1.103x; without optimizer= 1.124x, 1.145x -> 1.081x, 1.095x; every=1 1.361x, 1.333x -> 1.340x,
1.342x. GPT-12, 20 rounds, one run each: every=10 1.044x -> 0.996x, without optimizer= 1.032x ->
1.014x, every=1 1.174x -> 1.159x.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
CLOCK = time.perf_counter          # --clock cpu: this thread's CPU time (robust on a shared machine)

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from gradviz.core.record import watch  # noqa: E402
from gradviz.core.script.load import load_script  # noqa: E402


def _models():
    mlp = load_script(ROOT / "samples" / "mlp_digits.py")
    gpt = load_script(ROOT / "samples" / "transformer.py")

    def mlp_case():
        torch.manual_seed(0)
        model = mlp.new_model()
        batches = [mlp.get_batch(i) for i in range(16)]
        return model, batches, mlp.module.loss_fn, mlp.make_optimizer

    def gpt_case():
        torch.manual_seed(0)
        model = gpt.module.make_gpt(12, 64)
        batches = [gpt.get_batch(i) for i in range(16)]
        return model, batches, gpt.module.loss_fn, gpt.make_optimizer

    return {"mlp": mlp_case, "gpt": gpt_case}


class Variant:
    def __init__(self, name, model, make_opt, loss_fn, batches, every, tmp, with_optimizer=True):
        self.name = name
        self.model = model
        self.opt = make_opt(model.parameters())
        self.loss_fn = loss_fn
        self.batches = batches
        self.i = 0
        opt = self.opt if with_optimizer else None        # the minimal call: watch(model, path, every=10)
        self.w = watch(model, Path(tmp) / f"{name}.gvrun", every=every, optimizer=opt) if every else None

    def steps(self, n: int) -> float:
        model, opt, loss_fn, w = self.model, self.opt, self.loss_fn, self.w
        t0 = CLOCK()
        for _ in range(n):
            inputs, targets = self.batches[self.i % len(self.batches)]
            self.i += 1
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(*inputs), targets)
            loss.backward()
            if w is not None:
                w.step(loss)
            opt.step()
        return CLOCK() - t0

    def close(self):
        if self.w is not None:
            self.w.close()


def bench(case_name: str, case, rounds: int, block: int, tmp: str) -> dict:
    model, batches, loss_fn, make_opt = case()
    variants = [Variant(f"{case_name}_plain", copy.deepcopy(model), make_opt, loss_fn, batches, 0, tmp),
                Variant(f"{case_name}_every10", copy.deepcopy(model), make_opt, loss_fn, batches, 10, tmp),
                Variant(f"{case_name}_minimal", copy.deepcopy(model), make_opt, loss_fn, batches, 10, tmp,
                        with_optimizer=False),
                Variant(f"{case_name}_every1", copy.deepcopy(model), make_opt, loss_fn, batches, 1, tmp)]
    for v in variants:                       # warm-up (allocator, first graph capture)
        v.steps(max(3, block // 2))
    times = {v.name: [] for v in variants}
    for r in range(rounds):
        k = r % len(variants)
        order = variants[k:] + variants[:k]
        for v in order:
            times[v.name].append(v.steps(block))
    for v in variants:
        v.close()
    plain = times[variants[0].name]
    out = {"step_ms": statistics.median(plain) / block * 1e3}
    for v in variants[1:]:
        ratios = sorted(t / p for t, p in zip(times[v.name], plain))
        key = v.name.rsplit("_", 1)[1]
        out[key] = statistics.median(ratios)
        out[key + "_q"] = (ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4])
        out[v.name.rsplit("_", 1)[1] + "_total"] = sum(times[v.name]) / sum(plain)
    return out


def profile(case, steps: int, every: int, tmp: str) -> None:
    import cProfile
    import pstats

    model, batches, loss_fn, make_opt = case()
    v = Variant("prof", model, make_opt, loss_fn, batches, every, tmp)
    v.steps(5)
    pr = cProfile.Profile()
    pr.enable()
    v.steps(steps)
    pr.disable()
    v.close()
    pstats.Stats(pr).sort_stats("cumulative").print_stats(35)


def rss_loop(n: int, tmp: str) -> None:
    import resource

    def rss_mb():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    marks = {}
    t0 = time.perf_counter()
    with watch(model, Path(tmp) / "rss.gvrun", every=10, optimizer=opt) as w:
        for step in range(n):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()
            if step in (1000, n // 2, n - 1):
                marks[step] = rss_mb()
    size = (Path(tmp) / "rss.gvrun").stat().st_size / 2 ** 20
    print(f"{n} steps in {time.perf_counter() - t0:.1f} s; RSS MB at steps {marks}; run file {size:.1f} MB")
    first, last = marks[1000], marks[n - 1]
    print(f"RSS growth after step 1000: {last - first:+.1f} MB")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--only", choices=["mlp", "gpt"])
    ap.add_argument("--profile", choices=["mlp", "gpt"])
    ap.add_argument("--every", type=int, default=1, help="with --profile")
    ap.add_argument("--rss", type=int, metavar="STEPS")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: time blocks by this thread's CPU time, not wall time (other processes "
                         "sharing the cores then add no noise; the background commit thread is not counted)")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    cases = _models()
    with tempfile.TemporaryDirectory() as tmp:
        if args.rss:
            rss_loop(args.rss, tmp)
            return 0
        if args.profile:
            profile(cases[args.profile], 100, args.every, tmp)
            return 0
        from gradviz.core import native
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, rounds={args.rounds} "
              f"block={args.block}, {args.clock} clock, native accelerator: "
              f"{'yes' if native.get() is not None else 'no'}")
        for name, case in cases.items():
            if args.only and name != args.only:
                continue
            r = bench(name, case, args.rounds, args.block, tmp)
            q10, qm, q1 = r["every10_q"], r["minimal_q"], r["every1_q"]
            print(f"{name:4s} plain {r['step_ms']:.2f} ms/step | every=10 {r['every10']:.3f}x "
                  f"(quartiles {q10[0]:.3f}-{q10[1]:.3f}) | every=10 without optimizer= {r['minimal']:.3f}x "
                  f"(quartiles {qm[0]:.3f}-{qm[1]:.3f}) | every=1 {r['every1']:.3f}x "
                  f"(quartiles {q1[0]:.3f}-{q1[1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
