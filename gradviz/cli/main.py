"""Entry point of ``gradviz`` and ``python -m gradviz``.

Each sub-command lives in ``gradviz/cli/<name>_cmd.py`` and exposes
``add_parser(subparsers)`` and ``run(args) -> int``; every one runs under the one guard
(``cli/guard.py``: exit statuses, stdout routing, ``--timeout``, Ctrl-C). Without a
sub-command the desktop app starts (Qt is imported only then).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from gradviz.cli.display import prepare_display
from gradviz.cli.arg_types import OneLineParser, window_size
from gradviz.cli.meta_flag import add_meta_argument
from gradviz.cli.options import SCRIPT_ONLY_COMMANDS, USER_CODE_COMMANDS, add_common_options, configure_logging, prepare
from gradviz.core.runtime.errors import GradvizError
from gradviz.cli.say import say

SUBCOMMANDS = {
    "export": "gradviz.cli.export_cmd",
    "check": "gradviz.cli.check_cmd",
    "gradcheck": "gradviz.cli.gradcheck_cmd",
    "train": "gradviz.cli.train_cmd",
    "run": "gradviz.cli.run_cmd",
    "runs": "gradviz.cli.runs_cmd",
    "native": "gradviz.cli.native_cmd",
    "attribute": "gradviz.cli.attribute_cmd",
    "install-desktop": "gradviz.cli.desktop_cmd",
}
GLOBAL_FLAGS = ("-v", "--verbose")


def version_text() -> str:
    """``gradviz X (torch Y, Python Z)`` without importing torch (that takes a second)."""
    from importlib import metadata

    import gradviz

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"gradviz {gradviz.__version__} (torch {torch_version}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gradviz", description="See and debug backpropagation in PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        importlib.import_module(module_name).add_parser(sub)
        add_common_options(sub.choices[name], runs_user_code=name in USER_CODE_COMMANDS,
                           takes_models=name not in SCRIPT_ONLY_COMMANDS)
    return parser


def app_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="gradviz", description="Open the gradviz window (default: the built-in digits MLP sample). "
        "Sub-commands: " + ", ".join(SUBCOMMANDS) + " (gradviz COMMAND --help).")
    parser.add_argument("script", nargs="?", help="model script or run file to open")
    parser.add_argument("--screenshot", metavar="PATH.png",
                        help="open the window, wait for the graph, save a grab of it and exit "
                             "(works without a display: Qt then draws offscreen)")
    parser.add_argument("--size", type=window_size, default="1400x900", help="window size for --screenshot (WxH)")
    parser.add_argument("--train-steps", type=int, default=0, metavar="N",
                        help="with --screenshot: train N steps in the window's trainer first (then paused)")
    parser.add_argument("--select", metavar="NODE", help="with --screenshot: select a node (a parameter name, "
                        "a node id, a module path or a fold's label)")
    parser.add_argument("--unfold", action="store_true",
                        help="with --screenshot: unfold the selected fold box (or every one)")
    parser.add_argument("--report", metavar="OUT.json",
                        help="with --screenshot: write what every panel shows, with its step, as JSON")
    add_meta_argument(parser)
    parser.add_argument("--version", action="version", version=version_text())
    add_common_options(parser, runs_user_code=False, opens_models=True)
    return parser


def _split_global_flags(argv: list[str]) -> tuple[bool, list[str]]:
    """``--verbose`` given before the sub-command name, and the rest."""
    verbose = False
    while argv and argv[0] in GLOBAL_FLAGS:
        verbose = True
        argv = argv[1:]
    return verbose, argv


def run_command(args: argparse.Namespace) -> int:
    from gradviz.cli.guard import run_guarded

    module = importlib.import_module(SUBCOMMANDS[args.command])
    runs_user_code = args.command in USER_CODE_COMMANDS

    def setup() -> None:
        prepare(args)          # before the script runs: it may chdir at import

    return run_guarded(args.command, lambda: module.run(args), setup=setup,
                       script=lambda: getattr(args, "script", None),
                       as_json=bool(getattr(args, "json", False)), timeout=getattr(args, "timeout", None),
                       user_code=runs_user_code)


def main(argv: list[str] | None = None) -> int:
    """The ``gradviz`` command. Called as the process's entry (``argv`` None), it also holds the
    cycle collector while gradviz starts (``core/runtime/gc_pause.py``) and skips the interpreter's last
    garbage collection (see ``_skip_final_collection``)."""
    if argv is None:
        from gradviz.core.runtime.gc_pause import hold_while_starting, started

        hold_while_starting()
        try:
            code = _main(argv)
        finally:
            started()       # a no-op when the window, a trace or the user's script ended the hold
        _skip_final_collection()
        return code
    return _main(argv)


def _skip_final_collection() -> None:
    """``gc.freeze()`` as the process ends: the final collection at interpreter shutdown walks every
    object torch, Qt, networkx and the traced graph made, 0.6-1.1 s CPU after the window closed on
    GPT-200 (0.2 s frozen); export, check and the rest return 0.4 s sooner. Python never promised
    ``__del__`` of objects still alive at exit, and gradviz closes its files and run databases itself."""
    import gc

    gc.freeze()


def _main(argv: list[str] | None) -> int:
    try:
        return _dispatch(argv)
    except OSError as exc:     # --help or --version into a closed pipe (| head): nothing more to say
        from gradviz.cli.guard import closed_output, end_quietly

        if not closed_output(exc):
            raise
        return end_quietly()


def _dispatch(argv: list[str] | None) -> int:
    verbose, argv = _split_global_flags(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser() if argv and argv[0] in SUBCOMMANDS else app_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code == 2:
            return 2        # a refused argument: OneLineParser said which, in one line
        raise               # --help, --version
    if argv and argv[0] in SUBCOMMANDS:
        configure_logging(verbose or getattr(args, "verbose", False))
        return run_command(args)
    configure_logging(verbose or getattr(args, "verbose", False))
    problem = prepare_display(screenshot=bool(args.screenshot))   # before Qt, whose answer is an abort
    if problem:
        say(f"gradviz: {problem}")
        return 2
    try:
        prepare(args)        # a callable or a .pt2 becomes a generated script; a weights file is refused
    except GradvizError as exc:
        say(f"gradviz: {exc}")
        return 2
    staged = args.train_steps or args.select or args.unfold or args.report
    if staged and not args.screenshot:
        say("gradviz: --train-steps, --select, --unfold and --report go with --screenshot")
        return 2
    if args.train_steps < 0:
        say(f"gradviz: --train-steps must be 0 or more, not {args.train_steps}")
        return 2
    from gradviz.app.launch import run_app  # Qt loads here, and only here
    from gradviz.app.screenshot_script import ScreenshotPlan

    plan = ScreenshotPlan(train_steps=args.train_steps, select=args.select, unfold=args.unfold, report=args.report)
    return run_app(script=args.script, screenshot=args.screenshot, size=args.size, meta=args.meta,
                   note=getattr(args, "model_note", None), plan=plan)
