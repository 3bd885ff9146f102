"""``gradviz runs show RUN [--json]``: summary of a recorded run (all its rank files);
``gradviz runs export RUN -o steps.csv|steps.json|steps.parquet``: every step's values
(``core/record/run_table.py`` documents the columns).

Exit status: 0 ok, 2 for a missing, corrupted, foreign or too-new run file.
"""
from __future__ import annotations

import argparse
import json
import time

from gradviz.cli.say import say


def add_parser(sub) -> None:
    p = sub.add_parser("runs", help="inspect runs recorded with gradviz.watch",
                       description="Inspect runs recorded with gradviz.watch (.gvrun files).")
    runs_sub = p.add_subparsers(dest="runs_command", metavar="ACTION")
    show = runs_sub.add_parser("show", help="summary: steps, last loss, gradient norms, ranks, findings")
    show.add_argument("run", help="run file (run.gvrun finds its run.rankN.gvrun files too), or a folder "
                      "holding the rank files of one run")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    export = runs_sub.add_parser("export", help="every recorded step's loss, lr and gradient norms to CSV, JSON or "
                                 "Parquet", description="Write one row per recorded step: step, time, loss, lr, "
                                 "grad_norm, update_ratio, and grad_norm/NAME, update_ratio/NAME per parameter "
                                 "(JSON also holds the node norms of the sampled steps).")
    export.add_argument("run", help="run file (or the rank files of one run: --rank picks one)")
    export.add_argument("-o", "--output", required=True, metavar="FILE", help="steps.csv, steps.json or steps.parquet")
    export.add_argument("--rank", type=int, default=0, help="which rank's file of a multi-rank run (default 0)")
    from gradviz.cli.runs_diff_cmd import add_diff_parser   # views': gradviz runs diff

    add_diff_parser(runs_sub)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "runs_command", None) == "diff":
        from gradviz.cli.runs_diff_cmd import run_diff

        return run_diff(args)
    if getattr(args, "runs_command", None) == "export":
        return run_export(args)
    if getattr(args, "runs_command", None) != "show":
        say("usage: gradviz runs show RUN [--json] | gradviz runs diff A B [--json] | gradviz runs export RUN -o FILE")
        return 2
    from gradviz.core.record.reader import open_ranks
    from gradviz.core.record.loading import summarize
    from gradviz.core.record.schema import RecordError

    try:
        readers = open_ranks(args.run)
    except RecordError as exc:
        say(f"gradviz runs: {exc}")
        return 2
    try:
        info = summarize(readers)
    except RecordError as exc:
        say(f"gradviz runs: {exc}")
        return 2
    finally:
        for r in readers:
            r.close()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(_text(info))
    return 0


def _fmt(x) -> str:
    from gradviz.core.runtime.formatting import number

    return number(x, none="-")


_CLIP_WORDS = {"before_clip": "before the trainer's clip", "after_clip": "after the trainer's clip",
               "mixed": "before the trainer's clip, after it on some steps"}


def _clip_line(r: dict) -> str:
    """Which gradient norms a trainer callback recorded (meta ``grad_norms``, ``max_grad_norm``)."""
    clip = r.get("max_grad_norm")
    at = f"max_grad_norm {_fmt(clip)}" if clip is not None else "no clip"
    return f"gradient norms: {_CLIP_WORDS.get(r['grad_norms'], r['grad_norms'])} ({at})"


def _text(info: dict) -> str:
    from gradviz.core.record.analysis import shard_lines

    lines = []
    for r in info["ranks"]:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created"])) if r.get("created") else "-"
        head = f"{r['path']}"
        if r["world_size"] > 1:
            head += f"  (rank {r['rank']} of {r['world_size']}"
            head += f", node {r['node']} of {r['nodes']})" if r.get("nodes", 1) > 1 else ")"
        lines.append(head)
        lines.append(f"  model {r['model_class']}, {r['n_params']} parameters; {r['hostname']} pid {r['pid']}, "
                     f"created {created}, {r['status']}")
        span = f"steps {r['first_step']}..{r['last_step']}" if r["steps"] else "no steps"
        lines.append(f"  {r['steps']} steps ({span}) in {r['seconds']:.1f} s; last loss {_fmt(r['last_loss'])}")
        g = r["grad_norm"]
        if g:
            lines.append(f"  global grad norm: last {_fmt(g['last'])}, min {_fmt(g['min'])}, median "
                         f"{_fmt(g['median'])}, max {_fmt(g['max'])}")
        if r.get("grad_norms"):
            lines.append("  " + _clip_line(r))
        lines.append(f"  node norms at {r['node_steps']} steps, {r['graphs']} graph structure(s)")
        lines += [f"  note: {note}" for note in r.get("notes") or ()]       # what the reader could not read
    lines += shard_lines(info["ranks"])
    if info["findings"]:
        lines.append("findings:")
        for f in info["findings"]:
            lines.append(f"  [{f['severity']}] {f['code']}: {f['message']}")
    else:
        lines.append("findings: none")
    return "\n".join(lines)


def run_export(args: argparse.Namespace) -> int:
    from gradviz.core.record.run_table import EXPORT_SUFFIXES, export_steps, open_run
    from gradviz.core.record.schema import RecordError
    from gradviz.core.runtime.atomic import ExportError

    if not args.output.lower().endswith(EXPORT_SUFFIXES):
        say(f"gradviz runs export: {args.output}: write .csv, .json or .parquet")
        return 2
    try:
        table = open_run(args.run, rank=args.rank, nodes=args.output.lower().endswith(".json"))
        written = export_steps(table, args.output)
    except RecordError as exc:
        say(f"gradviz runs: {exc}")
        return 2
    except (ValueError, ExportError) as exc:
        say(f"gradviz runs export: {exc}")
        return 2
    except OSError as exc:
        say(f"gradviz runs export: cannot write {args.output}: {exc.strerror or exc}")
        return 2
    print(f"wrote {written} ({len(table)} steps, {len(table.param_names)} parameters"
          + (f", node norms at {len(table.node_norms)} steps" if table.node_norms else "") + ")")
    return 0
