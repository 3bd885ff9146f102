"""What the views cost, against the work they stand on, measured in the same run.

    python benchmarks/bench_views.py [--rounds N]

- attribution: ``attribute(method=...)`` per forward+backward pass, against one plain
  forward+backward of the same script (the ratio is the overhead per pass: the path, the
  embedding tap, float64 accumulation); IG with N steps makes N+2 passes;
- cut branches: ``trace`` of a script with a ``.detach()`` bug (trace + the rerun under
  the tape) against ``trace`` of the same script fixed;
- the failing forward: ``trace_failure`` against ``trace`` of the same model with the bug fixed;
- compare: ``compare`` + ``compare_views`` of two recorded runs (before/after a detach fix, and
  two steps of one run) against reading one run's graph and node norms, as the Runs view does.
Best of N rounds each; ratios are what to quote (the machine is shared).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "samples"


def best(fn, rounds: int) -> float:
    fn()                                     # warm-up: imports, first-call costs
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def plain_pass(path: Path):
    from gradviz.core.script.load import load_script

    ms = load_script(path)
    torch.manual_seed(0)
    model = ms.new_model().eval()
    inputs, targets = ms.get_batch(0)

    def run():
        ms.compute_loss(model, inputs, targets).backward()
    return run


def attribution_rows(rounds: int) -> None:
    from gradviz.core.attribution.attribute import attribute
    from gradviz.core.script.load import load_script

    print("attribution (per pass, against one plain forward+backward)")
    for name in ("mlp_digits.py", "cnn.py", "transformer.py"):
        path = SAMPLES / name
        ms = load_script(path)
        plain = best(plain_pass(path), rounds)
        for method, steps in (("saliency", 1), ("ig", 32)):
            got = {}

            def run():
                got["r"] = attribute(ms, method=method, steps=steps)
            t = best(run, max(1, rounds // 2))
            per = t / got["r"].passes
            print(f"  {name:16} {method:9} {got['r'].passes:3} passes {t * 1e3:8.1f} ms   per pass {per * 1e3:7.2f} ms"
                  f"   plain {plain * 1e3:7.2f} ms   ratio {per / plain:5.2f}x")


def fixed_copy(path: Path, old: str, new: str) -> Path:
    folder = Path(tempfile.mkdtemp())
    target = folder / path.name
    target.write_text(path.read_text().replace(old, new))
    return target


def cut_rows(rounds: int) -> None:
    from gradviz.core.trace.partial_trace import trace_failure
    from gradviz.core.trace.tracer import trace

    print("cut branches and the failing forward (against trace of the fixed script)")
    bug = SAMPLES / "bugs" / "detach.py"
    fixed = fixed_copy(bug, "features.detach()", "features")
    t_bug, t_fixed = best(lambda: trace(bug), rounds), best(lambda: trace(fixed), rounds)
    print(f"  detach.py  trace with cut branches {t_bug * 1e3:7.1f} ms   fixed {t_fixed * 1e3:7.1f} ms"
          f"   ratio {t_bug / t_fixed:5.2f}x")
    broken = ROOT / "tests" / "scripts" / "views" / "bad_linear.py"
    repaired = fixed_copy(broken, "nn.Linear(20, 4)", "nn.Linear(16, 4)")
    t_fail, t_ok = best(lambda: trace_failure(broken), rounds), best(lambda: trace(repaired), rounds)
    print(f"  bad_linear.py  trace_failure {t_fail * 1e3:7.1f} ms   trace fixed {t_ok * 1e3:7.1f} ms"
          f"   ratio {t_fail / t_ok:5.2f}x")


def record_run(path: Path, detach: bool, steps: int = 40) -> Path:
    import gradviz
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU())
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            f = self.encoder(x)
            return self.head(f.detach() if detach else f)

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with gradviz.watch(model, path, every=5, optimizer=opt) as w:
        for s in range(steps):
            g = torch.Generator().manual_seed(s)
            x, y = torch.randn(32, 64, generator=g), torch.randint(10, (32,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()
    return path


def compare_rows(rounds: int) -> None:
    from gradviz.core.record.compare import compare
    from gradviz.core.record.compare_view import compare_views
    from gradviz.core.record.reader import open_run

    print("compare (against reading one run's graph and node norms)")
    folder = Path(tempfile.mkdtemp())
    before, after = record_run(folder / "before.gvrun", True), record_run(folder / "after.gvrun", False)

    def read_one():
        with open_run(after) as r:
            r.graph_at()
            r.node_norms()
    t_read = best(read_one, rounds)
    for title, a, b in (("before/after a fix", str(before), str(after)),
                        ("two steps of a run", f"{after}@first", f"{after}@last")):
        t = best(lambda: compare_views(compare(a, b)), rounds)
        print(f"  {title:20} compare+views {t * 1e3:7.1f} ms   read one run {t_read * 1e3:7.1f} ms"
              f"   ratio {t / t_read:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    attribution_rows(args.rounds)
    cut_rows(args.rounds)
    compare_rows(args.rounds)


if __name__ == "__main__":
    main()
