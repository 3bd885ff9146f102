"""Benchmark trace -> layout -> SVG export against torchviz + Graphviz ``dot``, and scene painting.

    python benchmarks/bench_export.py              # MLP, CNN, GPT 12/48/100/200 blocks
    python benchmarks/bench_export.py --blocks 12 48 --dot-limit 30

For each model: node count, seconds for gradviz trace, layout and SVG export (scene build
+ paint + write), and, when torchviz and ``dot`` are installed, ``make_dot`` + ``dot -Tsvg``
on the same forward graph (skipped when the extrapolated time exceeds ``--dot-limit``).
Then the largest graph to PNG at scale 2 (the 100 MP cap) against SVG, and frames of the
fully expanded largest GPT scene painted into a 1400×900 image through a QGraphicsView at
several zoom levels (scene build time with the module frames' share).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402

from gradviz.core.script.load import load_script  # noqa: E402
from gradviz.core.trace.tracer import capture, trace  # noqa: E402

SAMPLES = ROOT / "samples"


def load_sample(name: str):
    spec = importlib.util.spec_from_file_location(f"gradviz_bench_{name}", SAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SAMPLES))
    spec.loader.exec_module(module)
    return module


def script_case(name: str):
    """(label, trace() -> graph, forward() -> (loss, params)) for a sample script."""
    path = SAMPLES / f"{name}.py"

    def forward():
        script = load_script(path)
        torch.manual_seed(0)
        model = script.new_model()
        inputs, targets = script.get_batch(0)
        loss = script.check_loss(script.compute_loss(model, inputs, targets))
        return loss, dict(model.named_parameters())

    return name, lambda: trace(path), forward


def gpt_case(gpt, n_blocks: int):
    def build():
        torch.manual_seed(0)
        model = gpt.make_gpt(n_blocks, 64)
        x, y = gpt.make_batch(0)
        return model, x, y

    def run_trace():
        model, x, y = build()
        with capture(model) as cap:
            loss = gpt.loss_fn(model(x), y)
        return trace(loss, model, capture=cap)

    def forward():
        model, x, y = build()
        return gpt.loss_fn(model(x), y), dict(model.named_parameters())

    return f"gpt-{n_blocks}", run_trace, forward


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def torchviz_dot(forward, folder: Path, limit_s: float) -> float | None:
    from torchviz import make_dot

    loss, params = forward()
    start = time.perf_counter()
    dot = make_dot(loss, params=params)
    src = folder / "torchviz.dot"
    src.write_text(dot.source)
    try:
        subprocess.run(["dot", "-Tsvg", str(src), "-o", str(folder / "torchviz.svg")], check=True,
                       timeout=limit_s, capture_output=True)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def paint_benchmark(graph, layout, frames: int = 5, save_dir: str | None = None) -> list[tuple[str, float]]:
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtWidgets import QApplication, QGraphicsView

    from gradviz.render.scene.scene import GraphScene

    from gradviz.render.parts.frames import build_frames

    scene, build_s = timed(lambda: _scene(GraphScene, graph, layout))
    _, frames_s = timed(lambda: build_frames(graph, scene.index, scene.rects))
    view = QGraphicsView(scene)
    view.resize(1400, 900)
    view.setRenderHints(QPainter.Antialiasing | QPainter.TextAntialiasing)
    view.setViewportUpdateMode(QGraphicsView.SmartViewportUpdate)
    view.show()  # lays out the viewport: fitInView and centerOn need its real size
    QApplication.processEvents()
    image = QImage(1400, 900, QImage.Format_ARGB32_Premultiplied)
    rect = scene.graph_rect()
    results = [("scene build (s)", build_s),
               (f"  of which {len(scene.frames)} module frames (s)", frames_s)]

    def measure(label: str, setup) -> None:
        setup()
        times = []
        for k in range(frames + 1):
            painter = QPainter(image)
            start = time.perf_counter()
            view.render(painter)
            painter.end()
            if k:  # the first frame fills caches (elided text, colour groups)
                times.append(time.perf_counter() - start)
        results.append((label, 1000 * sum(times) / len(times)))
        if save_dir is not None:
            image.save(str(Path(save_dir) / ("frame_" + "".join(c if c.isalnum() else "_" for c in label) + ".png")))

    def fit():
        view.fitInView(rect, Qt.KeepAspectRatio)

    def zoom(z: float, where: float):
        def setup():
            view.resetTransform()
            view.scale(z, z)
            view.centerOn(QPointF(rect.center().x(), rect.top() + where * rect.height()))
        return setup

    measure("fit (whole graph)", fit)
    measure("zoom 0.25 (overview)", zoom(0.25, 0.5))
    measure("zoom 0.5", zoom(0.5, 0.5))
    measure("1:1", zoom(1.0, 0.5))
    measure("zoom 2", zoom(2.0, 0.5))
    return results


def png_benchmark(graph, layout, folder: Path) -> None:
    """The largest graph to PNG at scale 2 (capped at 100 MP) against SVG of the same scene, same run."""
    from gradviz.render.export.formats import ImageOptions, export_scene
    from gradviz.render.export.image_export import scene_for

    scene = scene_for(graph, layout=layout)
    svg, t_svg = timed(lambda: export_scene(scene, folder / "big.svg"))
    png, t_png = timed(lambda: export_scene(scene, folder / "big.png", ImageOptions(scale=2.0)))
    w, h = png.pixels
    print(f"\nPNG at 2x: {w:,}x{h:,} = {w * h / 1e6:.1f} MP in {t_png:.2f} s "
          f"({t_png / t_svg:.1f}x the SVG's {t_svg:.2f} s){'; ' + png.note if png.note else ''}")


def _scene(cls, graph, layout):
    scene = cls()
    scene.set_graph(graph, layout)
    return scene


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="*", default=[12, 48, 100, 200])
    parser.add_argument("--dot-limit", type=float, default=90.0, help="skip torchviz+dot beyond this many seconds")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared 2-core box more threads oversubscribe "
                        "the CPU and make trace times 5x slower and noisy)")
    parser.add_argument("--no-paint", action="store_true")
    parser.add_argument("--save-frames", metavar="DIR", help="save the last painted frame of each zoom level")
    args = parser.parse_args()

    from gradviz.render.export.formats import render_image
    from gradviz.render.primitives.qtcompat import ensure_app
    from gradviz.render.primitives.style import layout_graph

    ensure_app()
    torch.set_num_threads(max(1, args.threads))
    gpt = load_sample("transformer")
    gpt_case(gpt, 1)[1]()  # warm-up: first-call costs (imports, kernels) are not the graph's
    cases = [script_case("mlp_digits"), script_case("cnn")] + [gpt_case(gpt, n) for n in args.blocks]
    have_dot = shutil.which("dot") is not None and importlib.util.find_spec("torchviz") is not None
    print(f"{'model':<12}{'nodes':>8}{'trace':>8}{'layout':>8}{'svg':>8}{'total':>8}"
          f"{'torchviz+dot':>14}{'ratio':>8}   (seconds; ratio = torchviz+dot / gradviz total)")
    last = None
    dot_rate = None  # seconds per node^1.5 seen so far, to predict the next run
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, run_trace, forward in cases:
            graph, t_trace = timed(run_trace)
            lay, t_layout = timed(lambda: layout_graph(graph))
            _, t_svg = timed(lambda: render_image(graph, lay, folder / f"{label}.svg"))
            total = t_trace + t_layout + t_svg
            n = graph.number_of_nodes()
            dot_text, ratio = "-", ""
            if have_dot:
                predicted = dot_rate * n ** 1.5 if dot_rate else 0.0
                if predicted > args.dot_limit:
                    dot_text = f"skip(~{predicted:.0f}s)"
                else:
                    t_dot = torchviz_dot(forward, folder, args.dot_limit)
                    if t_dot is None:
                        dot_text = f">{args.dot_limit:.0f} (killed)"
                        dot_rate = args.dot_limit / n ** 1.5
                    else:
                        dot_rate = t_dot / n ** 1.5
                        dot_text = f"{t_dot:.2f}"
                        ratio = f"{t_dot / total:.1f}x"
            print(f"{label:<12}{n:>8,}{t_trace:>8.2f}{t_layout:>8.2f}{t_svg:>8.2f}{total:>8.2f}"
                  f"{dot_text:>14}{ratio:>8}", flush=True)
            last = (label, graph, lay)
        if last is not None:
            png_benchmark(last[1], last[2], folder)
    if not have_dot:
        print("torchviz or dot not installed: no baseline")
    if last is not None and not args.no_paint:
        label, graph, lay = last
        print(f"\npaint, {label} fully expanded ({graph.number_of_nodes():,} nodes), 1400x900, ms per frame:")
        for what, value in paint_benchmark(graph, lay, save_dir=args.save_frames):
            print(f"  {what:<22}{value:>9.3f}" if "(s)" in what else f"  {what:<22}{value:>9.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
