"""Time ``gradviz check`` on each sample (healthy and bug scripts).

    python benchmarks/bench_check.py [--rounds N] [--steps K] [SCRIPT ...]

Prints, per script, the best and median wall time of ``check`` and the findings' codes;
the goal is under 10 s per sample on a laptop CPU.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scripts", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0)
    args = ap.parse_args(argv)
    from gradviz.core.diagnosis.checklist import check_report

    scripts = [Path(s) for s in args.scripts] or (
        [ROOT / "samples" / f"{n}.py" for n in ("mlp_digits", "cnn", "transformer")]
        + sorted((ROOT / "samples" / "bugs").glob("*.py")))
    worst = 0.0
    print(f"{'script':28} {'best s':>7} {'median s':>9}  findings")
    for path in scripts:
        times, report = [], None
        for _ in range(args.rounds):
            t = time.perf_counter()
            report = check_report(path, steps=args.steps)
            times.append(time.perf_counter() - t)
        worst = max(worst, min(times))
        codes = ",".join(f.code for f in report.findings) or "-"
        print(f"{path.stem:28} {min(times):7.2f} {statistics.median(times):9.2f}  {codes}")
    print(f"slowest (best of {args.rounds}): {worst:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
