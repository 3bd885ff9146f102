"""``gradviz attribute SCRIPT [--method ig|saliency|grad-x-input] [--target K] [--steps N] [-o FILE]``.

Input attribution of the script's batch: which inputs (pixels, features, token positions)
the chosen output depends on. ``-o out.json`` writes
``{"method", "target", "inputs": [{"shape", "attribution", ...}], "completeness": {...}}``
(``attribution`` is a nested list shaped like the input; token ids: one number per
position); ``-o out.png`` draws it (Qt is loaded only for that). Without ``-o`` a short
report is printed. Exit status: 0 done; 2 the script or an option is unusable. A failed
completeness check of integrated gradients is printed as a warning (exit 0): the numbers
are written, with the check's result beside them.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
from pathlib import Path

from gradviz.cli import guard
from gradviz.cli.arg_types import MAX_STEP, integer
from gradviz.cli.say import say

log = logging.getLogger(__name__)
FORMATS = (".json", ".png")


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("attribute", help="input attribution: saliency, gradient x input, integrated gradients",
                       description="Attribute the script's loss (or one output) to its inputs on batch(STEP). "
                       "Integer inputs (token ids) are attributed through the embedding that looks them up.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn)")
    p.add_argument("--method", choices=["ig", "saliency", "grad-x-input"], default="ig",
                   help="ig: integrated gradients with a completeness check (default); saliency: |df/dx|; "
                        "grad-x-input: x * df/dx")
    p.add_argument("--target", default="loss", metavar="K",
                   help="what to attribute: 'loss' (default), an output index K (its logit summed over the "
                        "batch), 'label' (each example's own label) or 'pred' (each example's predicted class)")
    p.add_argument("--steps", type=integer(1, 10_000), default=50, metavar="N", help="integration points for ig (default 50)")
    p.add_argument("--baseline", default="zeros", metavar="B",
                   help="ig baseline: 'zeros' (default; zero embedding vectors for token ids), a number "
                        "(inputs filled with it; token ids set to it), or a .npy/.pt file of the input's shape")
    p.add_argument("--step", type=integer(0, MAX_STEP), default=0, help="which batch(step) to attribute (default 0)")
    p.add_argument("--example", default="0", metavar="I",
                   help="PNG: which example of the batch to draw, or 'all' for the batch's mean |attribution|")
    p.add_argument("--device", default=None, help="move the model to this device")
    p.add_argument("-o", "--output", metavar="FILE", help="write .json or .png (default: print a report)")
    p.set_defaults(command="attribute")
    return p


def _fail(message: str) -> int:
    say(f"gradviz attribute: {message}")
    return 2


def run(args: argparse.Namespace) -> int:
    from gradviz.core.attribution.attribute import AttributionError, attribute
    from gradviz.core.attribution.paths import read_baseline
    from gradviz.core.runtime.errors import GradvizError

    out = Path(args.output) if args.output else None
    if out is not None:
        if out.suffix.lower() not in FORMATS:
            return _fail(f"unknown extension '{out.suffix or '(none)'}' in {out} (use .json or .png)")
        folder = out.parent if str(out.parent) else Path(".")
        if not folder.is_dir():
            return _fail(f"cannot write {out}: folder {folder} does not exist")
    example = None if args.example == "all" else _int(args.example)
    if args.example != "all" and (example is None or example < 0):
        return _fail(f"--example takes an index from 0 or 'all', not {args.example!r}")
    try:
        baseline = read_baseline(args.baseline)
        with _thread_policy(args.device):
            result = attribute(args.script, method=args.method, target=args.target, steps=args.steps,
                               baseline=baseline, step=args.step, device=args.device)
    except AttributionError as exc:
        return _fail(str(exc))
    except GradvizError as exc:          # ScriptError: file:line: message
        say(str(exc) if getattr(exc, "location", None) else f"gradviz attribute: {exc}")
        return 2
    batch = _batch_size(result)
    if example is not None and out is not None and batch is not None and example >= batch:
        return _fail(f"--example {example}: the batch has {batch} example(s) (0..{batch - 1}), or use 'all'")
    c = result.completeness
    if c is not None and not c.ok:
        say(f"gradviz attribute: warning: completeness fails: the attributions sum to {c.attribution_sum:.6g} "
              f"but f(x) - f(baseline) = {c.output_delta:.6g} ({100 * c.rel_error:.2f} % off, more than 1 %); "
              f"raise --steps (now {result.steps})")
    if out is None:
        print(report(result), file=guard.out())
        return 0
    try:
        if out.suffix.lower() == ".json":
            _write_json(result, out)
        else:
            from gradviz.render.export.attribution_paint import save_png   # Qt loads here, and only here

            save_png(result, out, example=example)
    except GradvizError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write {out}: {exc.strerror or exc}")
    print(f"wrote {out} ({result.method}, target {result.target}, {result.passes} passes in {result.seconds:.2f} s)",
          file=guard.out())
    return 0


@contextlib.contextmanager
def _thread_policy(device: str | None):
    """On the CPU, one core left free while attributing, as ``gradviz train`` and the window do:
    torch's default takes every core, and with one busy its workers spin at each pass (under
    load, IG with 32 steps on a small BERT took 8.0 s with 2 threads and 0.47 s with 1). The
    count is put back after: run in-process (tests, notebooks) it must not change other work."""
    import torch

    from gradviz.core.runtime.devices import training_threads

    before = torch.get_num_threads()
    if device is None or str(device).startswith("cpu"):
        torch.set_num_threads(training_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _batch_size(result) -> int | None:
    """The number of examples in the attributed batch (the first dimension of an attributed input)."""
    for a in result.inputs:
        if a.attribution is not None and a.attribution.ndim > 0:
            return int(a.attribution.shape[0])
    return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _write_json(result, out: Path) -> None:
    from gradviz.core.runtime.atomic import atomic_write

    text = json.dumps(result.to_json(), allow_nan=False)
    atomic_write(out, lambda tmp: Path(tmp).write_text(text))


def report(result) -> str:
    """A short text report: the completeness check and the top elements of each input."""
    import numpy as np

    from gradviz.core.attribution.figure import header

    title, subtitle = header(result)
    lines = [title, "  " + subtitle]
    for a in result.inputs:
        head = f"input {a.index} ({a.kind}, shape {a.shape}, {a.dtype})"
        if a.through:
            head += f" through {a.through}"
        if a.attribution is None:
            lines.append(f"{head}: {a.note}")
            continue
        per_elem = np.abs(a.attribution).mean(axis=0) if a.attribution.ndim > 1 else np.abs(a.attribution)
        flat = per_elem.reshape(-1)
        top = np.argsort(-flat)[:5]
        where = ", ".join(f"{[int(k) for k in np.unravel_index(i, per_elem.shape)]}: {flat[i]:.4g}" for i in top)
        lines.append(f"{head}: total {a.attribution.sum():.6g}; largest mean |attribution| at {where}")
    return "\n".join(lines)
