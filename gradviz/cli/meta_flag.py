"""``--meta`` / ``--no-meta`` for the commands that trace (``export``, ``check``).

``--meta`` traces structure only on the meta device (shapes, modules, source lines,
memory estimates; no values). Without either flag a model whose weights and gradients
would not fit in this machine's memory is traced that way automatically, with a note on
stderr saying so (a build that outgrows the memory is stopped early: ``core/script/fit_guard.py``);
``--no-meta`` never switches.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from gradviz.cli.say import say


def add_meta_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--meta", action=argparse.BooleanOptionalAction, default=None,
                        help="structure only: build and run the model on PyTorch's meta device (no memory for "
                        "weights; shapes, modules and memory estimates, no gradient values). Default: only when "
                        "the model would not fit in memory; --no-meta never switches")


@dataclass
class MetaChoice:
    meta: bool
    script: Any                # the loaded script to trace
    model: Any = None          # the model already built (seeded as a trace builds it; or on meta)
    note: str | None = None    # why gradviz switched, for stderr


def choose_meta(args: argparse.Namespace, script, prog: str) -> MetaChoice:
    """What ``args.meta`` asks for; with no flag, build the model for real under a memory guard
    (``core/script/fit_guard.py``) and, if it would not fit, measure it on the meta device and trace its
    structure instead (printing why on stderr)."""
    if args.meta is not None:
        return MetaChoice(bool(args.meta), script)
    from gradviz.core.script.fit_guard import TooBig, build_within_memory
    from gradviz.core.script.meta import estimate

    try:
        return MetaChoice(False, script, build_within_memory(script))
    except TooBig:
        est = estimate(script, getattr(args, "device", None))
    if est is None:   # cannot be measured on meta either: let the real trace say what happens
        return MetaChoice(False, script)
    note = est.message(os.path.basename(str(script.path)))
    say(f"{prog}: {note} (--no-meta to trace with values anyway)")
    return MetaChoice(True, script, est.model, note)
