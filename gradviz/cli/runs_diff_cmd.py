"""``gradviz runs diff A B [--json] [--top N]``: which gradients changed between two steps or two runs.

A and B are run files, each optionally with a step: ``run.gvrun@10 run.gvrun@500`` (two
steps of one run) or ``before.gvrun after.gvrun`` (two runs, each at its last step).
Lists the parameters and graph nodes whose gradient norm changed most: gradients that
vanished, turned NaN/Inf or appeared first, then by the size of the ratio B/A.
Exit status: 0 ok, 2 for a missing, corrupted or foreign run file or a bad step.
"""
from __future__ import annotations

import argparse
import json
import math

from gradviz.cli.arg_types import integer
from gradviz.cli.say import say


def add_diff_parser(runs_sub) -> None:
    p = runs_sub.add_parser("diff", help="compare two steps of a run, or two runs: which gradient norms changed",
                            description="Compare gradient norms per parameter and per graph node between A and B "
                            "(RUN or RUN@STEP; the last step when no step is given).")
    p.add_argument("a", metavar="A", help="run file, optionally @STEP (e.g. before.gvrun or run.gvrun@10)")
    p.add_argument("b", metavar="B", help="run file, optionally @STEP")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    p.add_argument("--top", type=integer(0, 10 ** 9), default=10, metavar="N", help="list the N biggest changes (default 10; 0: all)")


def run_diff(args: argparse.Namespace) -> int:
    from gradviz.core.record.compare import compare
    from gradviz.core.record.schema import RecordError

    try:
        result = compare(args.a, args.b)
    except RecordError as exc:
        say(f"gradviz runs diff: {exc}")
        return 2
    top = args.top if args.top and args.top > 0 else None
    if args.json:
        print(json.dumps(result.to_dict(top), indent=2, allow_nan=False))
    else:
        print(text(result, top))
    return 0


def _fmt(x) -> str:
    from gradviz.core.runtime.formatting import number

    return number(x, none="-")


def _ratio(c) -> str:
    if c.change in ("vanished", "appeared", "nonfinite"):
        return c.change
    r = c.ratio
    if r is None:
        return "-"
    if math.isinf(r):
        return "from 0"
    return f"×{r:.3g}"


def _side_line(name: str, s) -> str:
    ranks = f", rank 0 of {s.ranks}" if s.ranks > 1 else ""
    nodes = f", node norms of step {s.node_step}" if s.node_step is not None else ", no node norms"
    return f"{name}: {s.path} step {s.step}{ranks} (loss {_fmt(s.loss)}, global grad norm {_fmt(s.grad_norm)}{nodes})"


def text(result, top: int | None) -> str:
    lines = [_side_line("A", result.a), _side_line("B", result.b)]
    lines.append("")
    lines.append(f"parameters whose gradient changed most (of {len(result.params)}):")
    for c in result.params[:top]:
        lines.append(f"  {_ratio(c):>12}  {c.name:40} {_fmt(c.a):>10} -> {_fmt(c.b)}")
    if result.matched_by == "none":
        lines.append("nodes: not compared (a side has no sampled node norms)")
        return "\n".join(lines)
    how = "by id (same graph)" if result.matched_by == "id" else \
        f"by module, op and order (the graphs differ: {result.unmatched_a} nodes only in A, {result.unmatched_b} only in B)"
    lines.append("")
    lines.append(f"graph nodes whose gradient changed most (of {len(result.nodes)}, matched {how}):")
    for c in result.nodes[:top]:
        where = f"{c.label} ({c.module})" if c.module else c.label
        lines.append(f"  {_ratio(c):>12}  {c.name:24} {where:36} {_fmt(c.a):>10} -> {_fmt(c.b)}")
    return "\n".join(lines)
