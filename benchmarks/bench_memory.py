"""Peak memory of gradviz on a model with ~1 GB of parameters, against plain PyTorch.

    python benchmarks/bench_memory.py [--gb 1.0] [--repeat 1]

Each measurement is a fresh process; its peak RSS is read from ``os.wait4``. The
baseline is the same script run by plain PyTorch: build the model, one forward and
``loss.backward()``. Then ``gradviz export`` to SVG and to JSON (every statistic), and
``gradviz check`` (the whole checklist, numerical gradient check included). Ratios are
peak RSS / baseline peak RSS, measured in this run. Targets (issue #11): export <= 1.5x,
check <= 2.0x.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = '''\
import torch
from torch import nn

WIDTH, LAYERS = {width}, {layers}


def model():
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, WIDTH, generator=g), torch.randint(10, (16,), generator=g)


def loss_fn(out, y):
    return nn.functional.cross_entropy(out, y)
'''

PLAIN = '''\
import sys, torch
sys.path.insert(0, {folder!r})
import big
torch.manual_seed(0)
m = big.model()
x, y = big.batch(0)
big.loss_fn(m(x), y).backward()
'''


def peak_rss(cmd: list[str], env: dict) -> tuple[float, float, int]:
    """(peak RSS in MB, seconds, exit status) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        print(f"  {' '.join(cmd[2:])} failed ({proc.returncode}): {err.strip()[-400:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="parameter memory of the model (float32)")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=1, help="runs per command (the smallest peak counts)")
    args = parser.parse_args()
    layers = max(1, round(args.gb * 2**30 / 4 / (args.width * args.width + args.width)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "big.py").write_text(SCRIPT.format(width=args.width, layers=layers))
        (folder / "plain.py").write_text(PLAIN.format(folder=str(folder)))
        script = str(folder / "big.py")
        gv = [sys.executable, "-m", "gradviz"]
        runs = [
            ("plain forward+backward", [sys.executable, str(folder / "plain.py")], None),
            ("gradviz export .svg", gv + ["export", script, "--no-meta", "-o", str(folder / "g.svg")], 1.5),
            ("gradviz export .json", gv + ["export", script, "--no-meta", "-o", str(folder / "g.json")], 1.5),
            ("gradviz check", gv + ["check", script, "--no-meta"], 2.0),
        ]
        params = layers * (args.width * args.width + args.width) + args.width * 10 + 10
        print(f"model: {layers} x Linear({args.width}, {args.width}) + head: {params / 1e6:.0f} M parameters, "
              f"{params * 4 / 2**30:.2f} GiB (float32)")
        print(f"{'command':<26}{'peak RSS':>12}{'ratio':>8}{'target':>8}{'time':>9}")
        base = None
        for label, cmd, target in runs:
            best = min((peak_rss(cmd, env) for _ in range(max(1, args.repeat))), key=lambda r: r[0])
            mb, seconds, _ = best
            base = base or mb
            ratio = mb / base
            mark = "" if target is None else (f"<={target:.1f}" + (" ok" if ratio <= target else " OVER"))
            print(f"{label:<26}{mb:>9.0f} MB{ratio:>7.2f}x{mark:>8}{seconds:>8.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
