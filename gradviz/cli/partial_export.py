"""``gradviz export`` of a script whose forward raises: write the graph up to the failing call.

The exit status stays 2 (the script is broken); the error with ``file:line`` has been
printed already; this adds the partial graph at the requested path and says so.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gradviz.cli.say import say


def export_failure(error: BaseException, args: Any, out: Path) -> None:
    from gradviz.core.trace.partial_trace import failure_graph_for
    from gradviz.render.export.formats import ExportError, ImageOptions, export_graph

    graph = failure_graph_for(error, args.script, step=args.step or 0, device=args.device)
    if graph is None:
        return
    options = ImageOptions(scale=args.scale, dpi=args.dpi, theme=args.theme,
                           max_pixels=int(args.max_pixels * 1e6), tiles=args.tiles)
    try:
        export_graph(graph, out, options=options)
    except (ExportError, OSError) as exc:
        say(f"gradviz export: cannot write the partial graph to {out}: {exc}")
        return
    failed = graph.graph["failed"]
    say(f"gradviz export: wrote {out}: the graph up to the failing call ({failed['op']} at "
          f"{failed['location'] or 'an unknown line'}, drawn in red; {graph.number_of_nodes()} nodes)")
