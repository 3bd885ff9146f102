"""What issue #24's guards cost: the memory guard's build, the safe .pt2 reader, the supervised process.

    python benchmarks/bench_guards.py [--rounds N]

Each row is a ratio against a baseline measured in the same run, rounds interleaved, medians:

- ``build_within_memory`` (every factory call sized on the meta device first) against a plain
  ``script.new_model()``, on the samples' GPT stack and CNN;
- gradviz's ``.pt2`` reader (``program_archive.load_program``: JSON checked, tensors rebuilt) against
  ``torch.export.load`` on a clean program (torch's is the unsafe baseline; run in a fresh interpreter);
- ``python -m gradviz check`` supervised (the worker forked) against ``GRADVIZ_SUPERVISE=0``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EXPORT = """\
import sys, torch
from torch import nn
torch.manual_seed(0)
m = nn.Sequential(*[nn.Linear(256, 256) for _ in range(24)])
torch.export.save(torch.export.export(m, (torch.randn(8, 256),)), sys.argv[1])
"""


def _median_ratio(fast, slow, rounds: int) -> tuple[float, float, float]:
    """Medians of ``slow()`` and ``fast()`` (interleaved), and slow/fast."""
    a, b = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        fast()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        slow()
        b.append(time.perf_counter() - t)
    fa, sb = statistics.median(a), statistics.median(b)
    return fa, sb, sb / fa


def bench_build(rounds: int) -> None:
    import torch

    from gradviz.core.script.fit_guard import build_within_memory
    from gradviz.core.script.load import load_script

    for name in ("transformer.py", "cnn.py"):
        script = load_script(ROOT / "samples" / name)

        def plain():
            torch.manual_seed(0)
            script.new_model()
        plain()
        build_within_memory(script)
        base, guarded, ratio = _median_ratio(plain, lambda: build_within_memory(script), rounds)
        print(f"build {name:15} plain {1e3 * base:8.1f} ms   guarded {1e3 * guarded:8.1f} ms   {ratio:5.2f}x")


def bench_reader(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.pt2"
        subprocess.run([sys.executable, "-c", EXPORT, str(path)], check=True, capture_output=True)
        code = ("import sys, time, torch; from gradviz.core.script.program_archive import load_program\n"
                "which, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3]); load = torch.export.load "
                "if which == 'torch' else load_program; load(path); ts = []\n"
                "for _ in range(n):\n    t = time.perf_counter(); load(path); ts.append(time.perf_counter() - t)\n"
                "ts.sort(); print(ts[len(ts) // 2])")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def one(which: str) -> float:
            out = subprocess.run([sys.executable, "-c", code, which, str(path), str(rounds)], check=True,
                                 capture_output=True, text=True, env=env).stdout
            return float(out.split()[-1])
        theirs, ours = one("torch"), one("gradviz")
        print(f"read .pt2 (24 Linear)   torch.export.load {1e3 * theirs:7.1f} ms   gradviz {1e3 * ours:7.1f} ms   "
              f"{ours / theirs:5.2f}x")


def bench_process(rounds: int) -> None:
    script = ROOT / "tests" / "scripts" / "tiny_linear.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0"}

    def run(supervise: str):
        subprocess.run([sys.executable, "-m", "gradviz", "check", str(script), "--no-gradcheck"], check=True,
                       capture_output=True, env={**env, "GRADVIZ_SUPERVISE": supervise})
    base, supervised, ratio = _median_ratio(lambda: run("0"), lambda: run("1"), max(3, rounds // 3))
    print(f"gradviz check (process) in-process {base:6.2f} s   supervised {supervised:6.2f} s   {ratio:5.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    bench_build(args.rounds)
    bench_reader(args.rounds)
    bench_process(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
