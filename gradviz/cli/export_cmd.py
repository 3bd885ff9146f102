"""``gradviz export SCRIPT -o FILE``: trace a model script and write the graph.

The format follows FILE's extension (``gradviz.render.export.formats.FORMATS``): .json .graphml
.dot (data) or .svg .png .pdf (drawn by the app's renderer, header and legend included).
``--check`` runs the health checklist first and draws what it finds (cut edges red
dashed, NaN origins with a "!" badge, each explained in the legend). A recorded run
(``RUN.gvrun``) is drawn instead of traced: its graph coloured by the node norms of ``--step``
(the nearest sampled step at or before it; the last one by default). Exit status: 0
written; 2 the script is broken (``file:line: message`` on stderr) or FILE cannot be written.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from gradviz.cli import guard
from gradviz.cli.arg_types import MAX_STEP, integer, real
from gradviz.cli.arg_types import depth as depth_or_auto
from gradviz.cli.meta_flag import add_meta_argument, choose_meta
from gradviz.cli.say import say


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("export", help="trace a model script and write its graph (json, graphml, dot, svg, png, pdf)",
                       description="Trace SCRIPT (one forward and backward) and write the autograd graph to FILE. "
                       "The extension picks the format: .json .graphml .dot .svg .png .pdf.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn), or a recorded run (RUN.gvrun)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write; the extension sets the format")
    p.add_argument("--collapse", type=depth_or_auto, default=None, metavar="DEPTH",
                   help="merge modules deeper than DEPTH into boxes (an integer), or 'auto': the readable "
                   "view (about 40 boxes, repeated blocks folded, the largest modules opened)")
    p.add_argument("--check", action="store_true",
                   help="run the health checklist and draw its findings (cut edges, NaN origins) with legend entries")
    p.add_argument("--step", type=integer(0, MAX_STEP), default=None,
                   help="which batch(step) to trace (default 0); for a run, the recorded step to colour by (default "
                        "the last one with node norms)")
    p.add_argument("--device", default=None, help="move the model to this device (default: where the script puts it)")
    p.add_argument("--scale", type=real(0.0, 64.0), default=2.0, help="PNG pixels per layout pixel (default 2; at most 64)")
    p.add_argument("--dpi", type=real(0.0, 100_000.0), default=None, help="resolution recorded in PNG/PDF (print size); PNG pixels come from --scale")
    p.add_argument("--max-pixels", type=real(0.0001, 1000.0, above=False), default=100.0, metavar="MP",
                   help="largest PNG in megapixels (default 100); a bigger one is scaled down, or tiled with --tiles")
    p.add_argument("--tiles", action="store_true",
                   help="PNG over --max-pixels: also write full-scale tiles FILE.r<row>c<col>.png")
    p.add_argument("--theme", choices=["light", "dark"], default="light", help="image colours (default light)")
    add_meta_argument(p)
    p.set_defaults(command="export")
    return p


def _fail(message: str) -> int:
    say(f"gradviz export: {message}")
    return 2


def _expanded(graph, collapse: str | None) -> set[str] | None:
    """``--collapse``: None, an integer depth, or 'auto' (``core/layout/auto_view.py``, the view
    the window and notebooks open with); raises ValueError on anything else."""
    from gradviz.core.layout.auto_view import expanded_for
    return expanded_for(graph, collapse)


def _marks(script: str, graph=None):
    """The health checklist's marks, and a one-line summary of what it found."""
    from gradviz.core.diagnosis import check
    from gradviz.core.output.marks import marks_from_findings

    findings = check(script)
    counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "info")}
    codes = ", ".join(dict.fromkeys(f.code for f in findings)) or "no problems found"
    summary = (f"health check: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info "
               f"({codes})")
    return marks_from_findings(findings, graph), summary


def run(args: argparse.Namespace) -> int:
    from gradviz.core.runtime.gc_pause import gc_paused

    with gc_paused():   # one command, then exit: the graph's live objects are never worth re-scanning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from gradviz.core.runtime.errors import ScriptError
    from gradviz.render.export.formats import ExportError, ImageOptions, check_target, export_graph

    out = Path(args.output)
    # Check the destination before tracing: a typo should not cost a whole trace.
    try:
        check_target(out)
    except ExportError as exc:
        return _fail(str(exc))

    start = time.perf_counter()
    if args.script.lower().endswith(".gvrun"):
        return _export_run(args, out, start)
    try:
        from gradviz.core.script.load import load_script
        from gradviz.core.trace.tracer import trace

        script = load_script(args.script)
        choice = choose_meta(args, script, "gradviz export")
        # images and DOT draw gradient norms only: the other statistics are not computed for them
        details = "full" if out.suffix.lower() in (".json", ".graphml") else "norms"
        graph = trace(choice.script, choice.model, step=args.step or 0, device=args.device, meta=choice.meta,
                      details=details)
    except ScriptError as exc:
        say(str(exc) if exc.location else f"gradviz export: {exc}")  # file:line: message
        from gradviz.cli.partial_export import export_failure

        export_failure(exc, args, out)    # a failing forward: the graph up to the failing call
        return 2
    traced = time.perf_counter()
    try:
        expanded = _expanded(graph, args.collapse)
    except ValueError:
        return _fail(f"--collapse takes an integer depth or 'auto', not {args.collapse!r}")
    marks, summary = _marks(args.script, graph) if args.check else (None, "")
    checked = time.perf_counter()
    options = ImageOptions(scale=args.scale, dpi=args.dpi, theme=args.theme,
                           max_pixels=int(args.max_pixels * 1e6), tiles=args.tiles)
    try:
        result = export_graph(graph, out, expanded=expanded, marks=marks, options=options)
    except ExportError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {out}: {exc.strerror or exc}")
    done = time.perf_counter()
    n = graph.number_of_nodes()
    shown = ""
    if expanded is not None:
        from gradviz.core.layout.grouping import visible_count
        how = "automatic view" if args.collapse == "auto" else f"collapsed to depth {args.collapse}"
        shown = f", {how}: {visible_count(graph, expanded):,} boxes"
    if graph.graph.get("meta"):
        shown += "; structure only (meta device): no gradient values"
    if summary:
        print(summary, file=guard.out())
    check = f", check {checked - traced:.2f} s" if args.check else ""
    print(f"wrote {out} ({n:,} nodes{shown}) in {done - start:.2f} s "
          f"(trace {traced - start:.2f} s{check}, export {done - checked:.2f} s)", file=guard.out())
    if result.note:
        print(f"note: {result.note}", file=guard.out())
    return 0


def _export_run(args: argparse.Namespace, out: Path, start: float) -> int:
    """A recorded run's graph, coloured by the node norms of one sampled step."""
    from gradviz.core.record.reader import open_ranks
    from gradviz.core.record.schema import RecordError
    from gradviz.render.export.formats import ExportError, ImageOptions, export_graph

    if args.check:
        return _fail("--check traces a script; a recorded run is drawn as it was recorded (drop --check)")
    try:
        readers = open_ranks(args.script)
    except RecordError as exc:
        return _fail(str(exc))
    try:
        graph = readers[0].graph_at(args.step)
    except RecordError as exc:
        return _fail(str(exc))
    finally:
        for r in readers:
            r.close()
    if graph is None:
        return _fail(f"{args.script} holds no graph (recorded with every=None, or no step sampled yet): record "
                     "with gradviz.watch(model, path, every=N) to keep the graph")
    try:
        expanded = _expanded(graph, args.collapse)
    except ValueError:
        return _fail(f"--collapse takes an integer depth or 'auto', not {args.collapse!r}")
    options = ImageOptions(scale=args.scale, dpi=args.dpi, theme=args.theme,
                           max_pixels=int(args.max_pixels * 1e6), tiles=args.tiles)
    try:
        result = export_graph(graph, out, expanded=expanded, options=options)
    except ExportError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {out}: {exc.strerror or exc}")
    step = graph.graph.get("step")
    asked = f" (asked for {args.step}: the nearest sampled step at or before it)" if args.step is not None \
        and step is not None and step != args.step else ""
    print(f"wrote {out} ({graph.number_of_nodes():,} nodes, coloured at step {step}{asked}) in "
          f"{time.perf_counter() - start:.2f} s", file=guard.out())
    if result.note:
        print(f"note: {result.note}", file=guard.out())
    return 0
