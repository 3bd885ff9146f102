"""In-process time of ``gradviz.core.trace.tracer.trace`` against the bare forward+backward of the same model.

    python benchmarks/bench_trace.py                        # this checkout, GPT-200 and Llama 70B (meta)
    python benchmarks/bench_trace.py --repos /tmp/main .    # before/after: several checkouts, same run
    python benchmarks/bench_trace.py --only gpt --repeat 5

What the window and ``gradviz export`` call: ``trace(script, model, details="norms")`` (GPT-200,
``samples/transformer.py`` make_gpt(200, 64), 11,017 nodes, values) and ``trace(script, model,
meta=True)`` (transformers' LlamaForCausalLM, 70B configuration, structure only on the meta device).
The model is built once, outside the timings (the app builds it first too, under its memory guard),
its gradients dropped between repeats. Baseline, same process, same model: forward, loss and
``loss.backward()`` with nothing of gradviz installed. Each checkout runs in its own child process
(``PYTHONPATH``); checkouts alternate ``--rounds`` times and each figure is the best of all its repeats,
so a busy machine (2 cores shared) slows both sides alike. Printed: CPU seconds (``process_time``,
less sensitive to load than wall) and wall seconds, and ratio = trace / bare (CPU).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GPT_SCRIPT = """\
import sys
sys.path.insert(0, {samples!r})
from transformer import make_gpt, batch, loss_fn

def model():
    return make_gpt(200, 64)
"""

CHILD = r"""
import gc, json, sys, time
import torch
from gradviz.core.script.meta import build_meta_model, meta_forward
from gradviz.core.script.load import load_script
from gradviz.core.trace.tracer import trace

which, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.set_num_threads(int(sys.argv[4]))
meta = which == "llama"
script = load_script(path)
torch.manual_seed(0)
model = build_meta_model(script) if meta else script.new_model()
device = torch.device("meta") if meta else torch.device("cpu")


def clock():
    return time.process_time(), time.perf_counter()


def since(start):
    cpu, wall = clock()
    return cpu - start[0], wall - start[1]


def bare():
    inputs, targets = script.get_batch(0)
    inputs = tuple(t.to(device) for t in inputs)
    targets = targets.to(device)
    gc.collect()
    start = clock()
    with meta_forward(meta):
        loss = script.compute_loss(model, inputs, targets)
        loss.backward()
    took = since(start)
    model.zero_grad(set_to_none=True)
    return took


def traced():
    gc.collect()
    start = clock()
    graph = trace(script, model, meta=meta, details="norms")
    took = since(start)
    model.zero_grad(set_to_none=True)
    return took, graph.number_of_nodes()


bare()          # warm-up: first calls of every op, lazy imports
traced()
out = {"bare": [], "trace": []}
for _ in range(repeat):
    out["bare"].append(bare())
    took, nodes = traced()
    out["trace"].append(took)
out["nodes"] = nodes
print(json.dumps(out))
"""


def run_child(repo: Path, which: str, script: str, repeat: int, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.run([sys.executable, "-c", CHILD, which, script, str(repeat), str(threads)], env=env,
                          capture_output=True, text=True, cwd=str(repo))
    if proc.returncode != 0:
        raise SystemExit(f"{repo} {which} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", nargs="*", default=[str(ROOT)], help="checkouts to compare (PYTHONPATH)")
    parser.add_argument("--only", nargs="*", default=["gpt", "llama"], choices=["gpt", "llama"])
    parser.add_argument("--repeat", type=int, default=3, help="repeats per child process")
    parser.add_argument("--rounds", type=int, default=2, help="child processes per checkout, alternating")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (1: on a shared machine, idle threads spinning at a busy "
                             "core's barrier would be counted as CPU time of both sides)")
    args = parser.parse_args()
    repos = [Path(r).resolve() for r in args.repos]
    folder = Path(tempfile.mkdtemp(prefix="gradviz-bench-trace-"))
    scripts = {"gpt": str(folder / "gpt_200.py"), "llama": str(ROOT / "samples" / "llama_70b.py")}
    (folder / "gpt_200.py").write_text(GPT_SCRIPT.format(samples=str(ROOT / "samples")))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; torch threads: {args.threads}", flush=True)
    for which in args.only:
        label = {"gpt": "GPT-200 (values, details=norms)", "llama": "Llama 70B (meta device, structure only)"}[which]
        print(f"\n== {label} ==")
        results: dict[Path, dict] = {r: {"bare": [], "trace": []} for r in repos}
        for _ in range(args.rounds):
            for repo in repos:
                got = run_child(repo, which, scripts[which], args.repeat, args.threads)
                results[repo]["bare"] += got["bare"]
                results[repo]["trace"] += got["trace"]
                results[repo]["nodes"] = got["nodes"]
        for repo in repos:
            r = results[repo]
            bare_cpu, bare_wall = min(c for c, _ in r["bare"]), min(w for _, w in r["bare"])
            tr_cpu, tr_wall = min(c for c, _ in r["trace"]), min(w for _, w in r["trace"])
            print(f"{str(repo):<32} {r['nodes']:>6,} nodes  bare fwd+bwd {bare_cpu:5.2f} s CPU ({bare_wall:5.2f} wall)"
                  f"  trace {tr_cpu:5.2f} s CPU ({tr_wall:5.2f} wall)  ratio {tr_cpu / bare_cpu:4.2f}x", flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
