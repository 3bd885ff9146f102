"""``gradviz native build|status``: the optional native accelerator of the recorder.

``build`` compiles it now against the installed torch (a C++ compiler and ninja needed; ~20 s)
into the cache (``$GRADVIZ_CACHE``, default ``~/.cache/gradviz``); ``status`` says whether it
is built and loads. Exit status: 0 ok, 1 the build or the load failed.
"""
from __future__ import annotations

import argparse
import json

from gradviz.cli.say import say


def add_parser(sub) -> None:
    p = sub.add_parser("native", help="build or inspect the recorder's optional native accelerator",
                       description="The recorder's optional C++ accelerator (gradient norms and per-node "
                       "norm hooks). Without it everything runs in Python, slower on small models.")
    actions = p.add_subparsers(dest="native_command", metavar="ACTION")
    build = actions.add_parser("build", help="compile it now (blocking, ~20 s)")
    build.add_argument("--verbose", action="store_true", help="show the compiler's output")
    status = actions.add_parser("status", help="is it built, loaded, where")
    status.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from gradviz.core import native

    if args.native_command == "build":
        if not native.compiler_available():
            say("gradviz native: no C++ compiler and ninja found (pip install ninja; a C++ compiler)")
            return 1
        try:
            native.build(verbose=args.verbose)
        except Exception as exc:
            say(f"gradviz native: build failed: {type(exc).__name__}: {exc}")
            return 1
        info = native.status()
        print(f"built in {info['build_seconds']:.1f} s: {info['path']}")
        return 0
    if args.native_command == "status":
        native.get()
        info = native.status()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            state = "loaded" if info["loaded"] else ("built" if info["built"] else "not built")
            print(f"native accelerator: {state} ({info['path']})")
            print(f"  mode GRADVIZ_NATIVE={info['mode']}, compiler available: {info['compiler']}")
            if info["error"]:
                print(f"  error: {info['error']}")
        return 0 if (info["loaded"] or not info["error"]) else 1
    say("usage: gradviz native build|status")
    return 2
