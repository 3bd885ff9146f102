"""Entry point of ``gradviz`` and ``python -m gradviz``.

Each sub-command lives in ``gradviz/cli/<name>_cmd.py`` and exposes
``add_parser(subparsers)`` and ``run(args) -> int``. Without a sub-command the
desktop app starts (Qt is imported only then).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# sub-command name -> module; a module not written yet is simply not offered
SUBCOMMANDS = {
    "export": "gradviz.cli.export_cmd",
    "check": "gradviz.cli.check_cmd",
    "gradcheck": "gradviz.cli.gradcheck_cmd",
    "train": "gradviz.cli.train_cmd",
    "runs": "gradviz.cli.runs_cmd",
    "native": "gradviz.cli.native_cmd",
    "attribute": "gradviz.cli.attribute_cmd",
}


def _available() -> dict[str, object]:
    found = {}
    for name, module_name in SUBCOMMANDS.items():
        try:
            found[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
    return found


def build_parser(commands: dict[str, object]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradviz", description="See and debug backpropagation in PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in commands.values():
        module.add_parser(sub)
    return parser


def app_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradviz", description="Open the gradviz window (default: the built-in digits MLP sample). "
        "Sub-commands: " + ", ".join(SUBCOMMANDS) + " (gradviz COMMAND --help).")
    parser.add_argument("script", nargs="?", help="model script or run file to open")
    parser.add_argument("--screenshot", metavar="PATH.png",
                        help="open the window, wait for the graph, save a grab of it and exit")
    parser.add_argument("--size", default="1400x900", help="window size for --screenshot (WxH)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        commands = _available()
        if argv[0] not in commands:
            print(f"gradviz: the '{argv[0]}' command is not available in this build", file=sys.stderr)
            return 2
        args = build_parser(commands).parse_args(argv)
        return int(commands[args.command].run(args) or 0)
    args = app_parser().parse_args(argv)
    from gradviz.app.launch import run_app  # Qt loads here, and only here

    return run_app(script=args.script, screenshot=args.screenshot, size=args.size)
