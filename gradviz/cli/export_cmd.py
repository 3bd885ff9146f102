"""``gradviz export SCRIPT -o FILE``: trace a model script and write the graph.

The format follows FILE's extension: .json .graphml .dot (data) or .svg .png .pdf
(drawn by the app's renderer, legend included). Exit status: 0 written; 2 the script
is broken (``file:line: message`` on stderr) or FILE cannot be written.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("export", help="trace a model script and write its graph (json, graphml, dot, svg, png, pdf)",
                       description="Trace SCRIPT (one forward and backward) and write the autograd graph to FILE. "
                       "The extension picks the format: .json .graphml .dot .svg .png .pdf.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write; the extension sets the format")
    p.add_argument("--collapse", default=None, metavar="DEPTH",
                   help="merge modules deeper than DEPTH into boxes (an integer, or 'auto' for ~200 items)")
    p.add_argument("--step", type=int, default=0, help="which batch(step) to trace (default 0)")
    p.add_argument("--device", default=None, help="move the model to this device (default: where the script puts it)")
    p.add_argument("--scale", type=float, default=2.0, help="PNG pixels per layout pixel (default 2)")
    p.add_argument("--dpi", type=float, default=None, help="resolution recorded in PNG/PDF (print size); PNG pixels come from --scale")
    p.add_argument("--theme", choices=["light", "dark"], default="light", help="image colours (default light)")
    p.set_defaults(command="export")
    return p


def _fail(message: str) -> int:
    print(f"gradviz export: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from gradviz.core.export import FORMATS, ExportError, export_graph
    from gradviz.core.script import ScriptError

    out = Path(args.output)
    # Check the destination before tracing: a typo should not cost a whole trace.
    if out.suffix.lower() not in FORMATS:
        return _fail(f"unknown extension '{out.suffix or '(none)'}' in {out} (use one of {' '.join(FORMATS)})")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        return _fail(f"cannot write {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        return _fail(f"cannot write {out}: folder {folder} is not writable")
    if args.scale <= 0:
        return _fail("--scale must be positive")

    start = time.perf_counter()
    try:
        from gradviz.core.trace import trace

        graph = trace(args.script, step=args.step, device=args.device)
    except ScriptError as exc:
        print(str(exc), file=sys.stderr)  # file:line: message
        return 2
    traced = time.perf_counter()

    depth = None
    if args.collapse is not None:
        if args.collapse == "auto":
            from gradviz.core.grouping import auto_depth
            depth = auto_depth(graph)
        else:
            try:
                depth = int(args.collapse)
            except ValueError:
                return _fail(f"--collapse takes an integer depth or 'auto', not {args.collapse!r}")
    try:
        export_graph(graph, out, collapse_depth=depth, scale=args.scale, dpi=args.dpi, theme=args.theme)
    except ExportError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {out}: {exc.strerror or exc}")
    done = time.perf_counter()
    n = graph.number_of_nodes()
    shown = f", collapsed to depth {depth}" if depth is not None else ""
    print(f"wrote {out} ({n:,} nodes{shown}) in {done - start:.2f} s "
          f"(trace {traced - start:.2f} s, export {done - traced:.2f} s)")
    return 0
