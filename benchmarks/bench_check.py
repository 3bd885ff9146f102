"""Time ``gradviz check`` on the samples or on the real-model corpus, against plain forward+backward.

    python benchmarks/bench_check.py [--rounds N] [--steps K] [SCRIPT ...]
    python benchmarks/bench_check.py --corpus [NAME ...]

Prints, per script, the best and median wall time of ``check``, the best time of one plain
forward+backward of the same script measured in the same run, their ratio, and the findings'
codes. The goal is under 10 s per sample on a laptop CPU; the corpus rows are what the
diagnosis tests cost in CI (run twice there: oldest and newest torch).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "corpus"


def plain_step(path: Path, rounds: int) -> float:
    """Best time of forward + loss + backward of the script's model, as a training step does
    (after one warm-up step: the first call of a model pays one-time costs a training loop amortises)."""
    from gradviz.core.script.load import load_script

    ms = load_script(path)
    torch.manual_seed(0)
    model = ms.new_model()
    inputs, targets = ms.get_batch(0)
    ms.compute_loss(model, inputs, targets).backward()
    best = float("inf")
    for _ in range(max(rounds, 3)):
        t = time.perf_counter()
        ms.compute_loss(model, inputs, targets).backward()
        best = min(best, time.perf_counter() - t)
    return best


def bench(label: str, path: Path, rounds: int, steps: int) -> float:
    from gradviz.core.diagnosis.checklist import check_report

    times, report = [], None
    for _ in range(rounds):
        t = time.perf_counter()
        report = check_report(path, steps=steps)
        times.append(time.perf_counter() - t)
    try:
        base = plain_step(path, rounds)
    except Exception:  # noqa: BLE001 - a bug sample's own step may not run at all: no baseline then
        base = float("nan")
    codes = ",".join(f.code for f in report.findings) or "-"
    print(f"{label:28} {min(times):7.2f} {statistics.median(times):9.2f} {base * 1e3:9.1f} {min(times) / base:8.0f}x"
          f"  {codes}", flush=True)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="*", help="scripts, or corpus names with --corpus")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--corpus", action="store_true", help="the real-model corpus of tests/corpus instead")
    args = ap.parse_args(argv)
    print(f"{'script':28} {'best s':>7} {'median s':>9} {'plain ms':>9} {'ratio':>9}  findings")
    total = 0.0
    if args.corpus:
        sys.path.insert(0, str(CORPUS))
        from corpus_models import MODELS
        for name in args.scripts or list(MODELS):
            os.environ["GRADVIZ_CORPUS"] = name
            total += bench(name, CORPUS / "zoo.py", args.rounds, args.steps)
    else:
        scripts = [Path(s) for s in args.scripts] or (
            [ROOT / "samples" / f"{n}.py" for n in ("mlp_digits", "cnn", "transformer")]
            + sorted((ROOT / "samples" / "bugs").glob("*.py")))
        for path in scripts:
            total += bench(path.stem, path, args.rounds, args.steps)
    print(f"total (best of {args.rounds} each): {total:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
