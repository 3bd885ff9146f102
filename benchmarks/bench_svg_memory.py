"""Peak memory and CPU of writing a big graph's SVG: streamed in parts (``render/export/svg_stream.py``)
against one QSvgGenerator document (what gradviz did before), same graph, same run.

    python benchmarks/bench_svg_memory.py                    # GPT-1600 (88k nodes), ~2 min CPU to trace
    python benchmarks/bench_svg_memory.py --blocks 200       # GPT-200 (11.6k nodes)
    python benchmarks/bench_svg_memory.py --script my_model.py

The graph is traced once (a child process) and pickled; each way of writing then runs in a
fresh process that loads it, lays it out, builds the scene and writes the SVG, reporting the
process's peak RSS and CPU seconds, and the peak added by the write alone (VmHWM before and
after). "one document" sets ``PART_BYTES`` beyond the SVG's size: a single QSvgGenerator
paints everything and converts its body in one piece, as before.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRACE = """\
import pickle, sys
from gradviz.core.trace.tracer import trace
pickle.dump(trace(sys.argv[1], details="norms"), open(sys.argv[2], "wb"), protocol=5)
"""

WRITE = """\
import gc, pickle, sys, time
gc.disable()   # as the CLI does (gc_paused)
def hwm():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
graph = pickle.load(open(sys.argv[1], "rb"))
from gradviz.render.export import image_export, svg_stream
if sys.argv[3] == "one":
    svg_stream.PART_BYTES = 1 << 62
scene = image_export.scene_for(graph)
page = image_export.make_page(scene)
before, t = hwm(), time.process_time()
image_export.write_svg(scene, page, image_export.Path(sys.argv[2]), image_export.ImageOptions())
print(f"{hwm() - before:.0f} {time.process_time() - t:.2f}")
"""


def run(cmd: list[str], env: dict) -> dict:
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} failed:\n{err[-2000:]}")
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024, "out": out.split()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=1600, help="GPT blocks (samples/transformer.py, d_model 16)")
    parser.add_argument("--script", help="a model script instead of the GPT stack")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = args.script
        if script is None:
            script = str(folder / f"gpt_{args.blocks}.py")
            Path(script).write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'samples')!r})\n"
                                    f"from transformer import make_gpt, batch, loss_fn\n\n"
                                    f"def model():\n    return make_gpt({args.blocks}, 16)\n")
        graph = folder / "graph.pkl"
        run([sys.executable, "-c", TRACE, script, str(graph)], env)
        print(f"load average {os.getloadavg()[0]:.1f}; graph of {Path(script).name}; per process: peak RSS, CPU s; "
              f"the write alone: peak added, CPU s")
        results = {}
        for way in ("one", "streamed", "one", "streamed"):   # interleaved: the load changes as it runs
            r = run([sys.executable, "-c", WRITE, str(graph), str(folder / f"{way}.svg"), way], env)
            size = (folder / f"{way}.svg").stat().st_size / 1e6
            results.setdefault(way, []).append(r)
            print(f"{way + ' document' if way == 'one' else way:<14} {r['rss']:7.0f} MB {r['cpu']:7.2f} s   "
                  f"write: +{r['out'][0]} MB {r['out'][1]} s   SVG {size:.0f} MB", flush=True)
        best = {w: (min(float(r["out"][0]) for r in rs), min(float(r["out"][1]) for r in rs),
                    min(r["rss"] for r in rs)) for w, rs in results.items()}   # least disturbed by the load
        print(f"streamed / one document (best of 2 each): peak RSS x{best['streamed'][2] / best['one'][2]:.2f}, "
              f"write peak x{best['streamed'][0] / max(best['one'][0], 1):.2f}, "
              f"write CPU x{best['streamed'][1] / max(best['one'][1], 1e-9):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
