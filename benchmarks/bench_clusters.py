"""Module frames as rectangles (#29): the clustered layered layout against today's and Graphviz's.

    python benchmarks/bench_clusters.py                 # samples, real models, the 11.6k GPT stack
    python benchmarks/bench_clusters.py --rounds 5 --dot-timeout 120

Per graph, in the same run:
- broken frames (``clusters.broken_frames``: a module of 2+ boxes whose bounding box holds a box of
  another module, so its frame cannot be a rectangle) for today's layout, the clustered one and
  ``dot`` with nested ``subgraph cluster_*`` (how torchview draws modules);
- edge crossings and total edge length of the clustered layout over today's;
- layout time, best of ``--rounds`` (today's and the clustered one alternately), and dot's;
- frame labels under an edge, a box or another frame's label (``labels_covered``), today's and the
  clustered layout's, in the scene an export draws, laid out as the export does (``--no-labels``
  leaves that out: it lays out and builds two more scenes per graph).

"Today's layout" is ``LayoutOptions(clusters=False)``: the code path main runs (layers, ordering
and x assignment unchanged there); the clustered layout is the default, given the frames' label
widths as the export gives them (``style.frame_label_room``; its time is in the clustered layout's).
Crossings are counted the same way for all three: each edge's polyline is read at the centre line
of every layer it spans, and two edges between the same two adjacent layers cross when their order
flips.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SAMPLES = ["samples/mlp_digits.py", "samples/transformer.py", "samples/cnn.py"]
CORPUS = ["gpt2", "bert", "llama", "resnet", "t5"]


def crossings(graph, lay) -> int:
    """Edge crossings between adjacent layers, from the drawn polylines (see the docstring)."""
    from gradviz.core.layout.order import _inversions

    ys = {}
    for v, layer in lay.layer.items():
        ys.setdefault(layer, []).append(lay.pos[v][1])
    layer_y = np.asarray([np.mean(ys[k]) for k in sorted(ys)])
    gaps, tops, bottoms = [], [], []
    for (u, v), pts in lay.edges.items():
        a, b = lay.layer.get(u), lay.layer.get(v)
        if a is None or b is None or a == b:
            continue
        lo, hi = min(a, b), max(a, b)
        p = np.asarray(pts, dtype=float)
        if p[0, 1] > p[-1, 1]:
            p = p[::-1]
        x_at = np.interp(layer_y[lo:hi + 1], p[:, 1], p[:, 0], left=p[0, 0], right=p[-1, 0])
        gaps.append(np.arange(lo, hi))
        tops.append(x_at[:-1])
        bottoms.append(x_at[1:])
    if not gaps:
        return 0
    gap, top, bottom = np.concatenate(gaps), np.concatenate(tops), np.concatenate(bottoms)
    o = np.lexsort((bottom, top, gap))   # by gap, then left to right at the top
    gap, bottom = gap[o], bottom[o]
    # rank by (gap, bottom x), stable: equal ends (edges into one node) keep their top order and
    # never count; a pair inverts only inside one gap
    ob = np.lexsort((bottom, gap))
    rank = np.empty(len(ob), dtype=np.int64)
    rank[ob] = np.arange(len(ob))
    return int(_inversions(rank))


def labels_covered(graph, opts) -> tuple[int, int]:
    """(frame labels under an edge's drawn curve, a box or another label, labels) in the scene an
    export draws with ``opts`` (``style.layout_graph``: room between layers for nested labels, the labels' widths;
    ``render.parts.frame_labels``)."""
    from gradviz.render.export.image_export import scene_for
    from gradviz.render.parts.frame_labels import covered, curve_segments, overlaps
    from gradviz.render.parts.frames import label_plates
    from gradviz.render.primitives.style import layout_graph

    lay = layout_graph(graph, opts)
    scene = scene_for(graph, layout=lay)
    plates = np.asarray(label_plates(scene.frames), dtype=float).reshape(-1, 4)
    boxes = np.asarray([(r.left(), r.top(), r.right(), r.bottom()) for r in scene.rects], dtype=float).reshape(-1, 4)
    hit = covered(plates, curve_segments(list(lay.edges.values())), boxes)
    hit[overlaps(plates)[0]] = True        # or under another frame's label
    return int(hit.sum()), len(plates)


def edge_length(lay) -> float:
    total = 0.0
    for pts in lay.edges.values():
        p = np.asarray(pts, dtype=float)
        total += float(np.hypot(*np.diff(p, axis=0).T).sum())
    return total


def best_of(fn, rounds: int) -> tuple[float, object]:
    out, best = None, math.inf
    for _ in range(rounds):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def graphs(include_huge: bool):
    from gradviz.core.trace.tracer import trace

    for path in SAMPLES + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "samples/bugs").glob("*.py")):
        try:
            yield path, trace(ROOT / path)
        except Exception as exc:   # a bug script that fails on purpose (syntax error, ...)
            print(f"  {path}: not traced ({type(exc).__name__})")
    for name in CORPUS:
        os.environ["GRADVIZ_CORPUS"] = name
        sys.path.insert(0, str(ROOT / "tests/corpus"))
        yield f"transformers {name}", trace(ROOT / "tests/corpus/zoo.py")
    if include_huge:
        from benchmarks.bench_layout import synthetic_gpt_graph
        yield "GPT stack (200 blocks)", synthetic_gpt_graph(200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dot-timeout", type=float, default=90.0)
    ap.add_argument("--no-huge", action="store_true")
    ap.add_argument("--no-labels", action="store_true")
    args = ap.parse_args()

    from gradviz.core.layout.clusters import broken_frames
    from gradviz.core.layout.graphviz_dot import layout_with_graphviz
    from gradviz.core.layout.layered import layout
    from gradviz.core.layout.types import LayoutOptions
    from gradviz.render.primitives.style import box_sizes, frame_label_room

    old_opts, new_opts = LayoutOptions(clusters=False), LayoutOptions()
    head = (f"{'graph':34} {'nodes':>6} {'broken old/new/dot':>19} {'cross new/old':>14} {'len new/old':>12}"
            f" {'t old':>7} {'t new':>7} {'new/old':>7} {'t dot':>8} {'dot/new':>8} {'labels hit old/new':>18}")
    print(head)
    rows = []
    for name, g in graphs(not args.no_huge):
        sizes = box_sizes(g)
        t_old = t_new = math.inf
        for _ in range(args.rounds):   # alternately, so both see the same machine load
            t, lay_old = best_of(lambda: layout(g, old_opts, sizes=sizes), 1)
            t_old = min(t_old, t)
            t, lay_new = best_of(lambda: layout(g, new_opts, sizes=sizes, label_room=frame_label_room(g)), 1)
            t_new = min(t_new, t)
        try:
            t_dot, lay_dot = best_of(lambda: layout_with_graphviz(g, timeout=args.dot_timeout, sizes=sizes,
                                                                  clusters=True), 1)
            dot_broken = str(len(broken_frames(g, lay_dot)))
        except subprocess.TimeoutExpired:
            t_dot, dot_broken = math.inf, "-"
        except RuntimeError as exc:
            t_dot, dot_broken = math.nan, f"({exc})"[:12]
        b_old, b_new = len(broken_frames(g, lay_old)), len(broken_frames(g, lay_new))
        c_old, c_new = crossings(g, lay_old), crossings(g, lay_new)
        l_old, l_new = edge_length(lay_old), edge_length(lay_new)
        cr = c_new / c_old if c_old else (1.0 if c_new == 0 else math.inf)
        labels_old = labels_new = (0, 0)
        if not args.no_labels:
            labels_old, labels_new = labels_covered(g, old_opts), labels_covered(g, new_opts)
        dot_t = f">{args.dot_timeout:.0f}s" if t_dot == math.inf else f"{t_dot:.3f}"
        dot_r = f">{args.dot_timeout / t_new:.0f}x" if t_dot == math.inf else f"{t_dot / t_new:.1f}x"
        print(f"{name[:34]:34} {len(g):6d} {f'{b_old}/{b_new}/{dot_broken}':>19} "
              f"{f'{c_new}/{c_old}={cr:.2f}':>14} {l_new / l_old:12.2f} {t_old:7.3f} {t_new:7.3f}"
              f" {t_new / t_old:7.2f} {dot_t:>8} {dot_r:>8}"
              f" {f'{labels_old[0]}/{labels_old[1]} {labels_new[0]}/{labels_new[1]}':>18}", flush=True)
        rows.append((name, b_new, c_new, c_old, l_new / l_old, t_new / t_old, labels_old, labels_new))
    total_c_new, total_c_old = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"\nbroken frames, clustered layout: {sum(r[1] for r in rows)} on {len(rows)} graphs; "
          f"crossings (sum) new/old {total_c_new}/{total_c_old} = {total_c_new / max(total_c_old, 1):.2f}; "
          f"edge length new/old: worst {max(r[4] for r in rows):.2f}, mean {np.mean([r[4] for r in rows]):.2f}, "
          f"over 1.10 on {sum(r[4] > 1.10 for r in rows)}")
    if not args.no_labels:
        def hit(k: int) -> str:
            h, t = sum(r[k][0] for r in rows), sum(r[k][1] for r in rows)
            return f"{h} of {t} on {sum(r[k][0] > 0 for r in rows)} graphs"
        print(f"frame labels under an edge, a box or another label: today's {hit(6)}, clustered {hit(7)}")


if __name__ == "__main__":
    main()
