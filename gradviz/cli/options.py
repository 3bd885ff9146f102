"""Options every command shares, and the checks made on them before any user code runs.

``--verbose`` (the ``gradviz`` logger at DEBUG on stderr) on every command; ``--timeout`` on
the commands that run a user's script. Before the script runs (it may ``os.chdir()`` at
import) relative paths given on the command line become absolute, and ``--device`` is
checked against what this machine has, so a typo gets one line instead of a torch traceback.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from gradviz.core.runtime.errors import GradvizError
from gradviz.core.runtime.messages import MESSAGE_LIMIT, one_line
from gradviz.core.runtime.paths import PathError, check_length, require_regular_file
from gradviz.cli.arg_types import MAX_SECONDS, real
from gradviz.cli.say import say

__all__ = ["USER_CODE_COMMANDS", "SCRIPT_ONLY_COMMANDS", "UsageError", "add_common_options", "prepare", "configure_logging"]

# the commands that import and run a user's script (they get --timeout and the guard's stdout routing)
USER_CODE_COMMANDS = ("export", "check", "gradcheck", "train", "attribute", "run")
# of those, the ones that run a whole script as it is (no model from a callable or a .pt2: no --input/--loss)
SCRIPT_ONLY_COMMANDS = ("run",)
# argument names that hold paths of files gradviz reads or writes; and those that may (a file, or
# something else: a PACKAGE.MODULE:CALLABLE, a number)
PATH_ARGS = ("output", "weights")
MAYBE_PATH_ARGS = ("script", "baseline")
RUN_ARGS = ("run", "a", "b")                 # runs show / runs diff: a run file or folder, maybe with @STEP
READ_ARGS = ("script", "weights", "baseline")   # files gradviz reads (when they exist)


class UsageError(GradvizError):
    """A command-line value that cannot work (exit 2, before anything runs)."""


def add_common_options(parser: argparse.ArgumentParser, runs_user_code: bool, opens_models: bool = False,
                       takes_models: bool = True) -> None:
    # SUPPRESS: a sub-command that does not see the flag must not reset one given before it
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log what gradviz does (and the traceback of an internal error) on stderr")
    if runs_user_code:
        parser.add_argument("--timeout", type=real(0.0, MAX_SECONDS), default=None, metavar="SECONDS",
                            help="stop the script after SECONDS (exit 2, naming the line it was at)")
    if (runs_user_code and takes_models) or opens_models:
        add_model_options(parser)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """A model without a script: SCRIPT may be PACKAGE.MODULE:CALLABLE or a .pt2 program (core/script/factory.py)."""
    group = parser.add_argument_group(
        "a model without a script", "SCRIPT may also be PACKAGE.MODULE:CALLABLE (called with no arguments to "
        "build the model) or a torch.export program (.pt2); gradviz then invents the inputs and the loss")
    group.add_argument("--input", action="append", metavar="SHAPE[:DTYPE[:HIGH]]",
                       help="one per positional input: 1,3,224,224 (float32, standard normal), 2,16:long "
                            "(token ids in [0, HIGH), default the model's input embedding)")
    group.add_argument("--config", metavar="KEY=VALUE,...",
                       help="build a model class from its configuration class with these overrides (transformers:"
                            "GPT2LMHeadModel --config n_layer=2,n_embd=32); for another callable, its keyword arguments")
    group.add_argument("--loss", metavar="sum|mean|ce[:CLASSES]", help="the invented loss (default sum)")
    group.add_argument("--weights", metavar="FILE",
                       help="load a state_dict into the model (safetensors, or torch.load(weights_only=True))")


class _OneLineFormatter(logging.Formatter):
    """Without ``--verbose`` a record is one clean line: a traceback it carries becomes ``: Type: message``
    (``--verbose`` prints the traceback itself); control characters and escapes are stripped."""

    verbose = False

    def format(self, record: logging.LogRecord) -> str:
        if self.verbose:
            return super().format(record)
        text = f"gradviz: {record.levelname}: {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text += f": {type(exc).__name__}: {exc} (--verbose shows the traceback)"
        return one_line(text, 2 * MESSAGE_LIMIT)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record (a test's redirect, the guard's routing)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(_OneLineFormatter("gradviz: %(levelname)s: %(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:   # StreamHandler.__init__ assigns it; the property decides
        pass


def configure_logging(verbose: bool) -> None:
    """The ``gradviz`` logger on stderr: warnings always, everything with ``--verbose``."""
    logger = logging.getLogger("gradviz")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    for handler in logger.handlers:
        if isinstance(handler.formatter, _OneLineFormatter):
            handler.formatter.verbose = verbose
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False   # a script's logging.basicConfig must not print gradviz's records twice


def check_paths(args: argparse.Namespace) -> None:
    """Every path on the command line short enough for this system, and every file gradviz will read a
    regular file (a FIFO or a device would block it forever); a folder only where a run folder may be."""
    for name in (*PATH_ARGS, *MAYBE_PATH_ARGS, *RUN_ARGS, "screenshot"):
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            try:
                check_length(value.rsplit("@", 1)[0] if name in RUN_ARGS else value, _flag(name))
            except PathError as exc:
                raise UsageError(str(exc)) from None
    folders_allowed = getattr(args, "command", None) not in USER_CODE_COMMANDS   # the app opens run folders
    for name in READ_ARGS:
        value = getattr(args, name, None)
        if not isinstance(value, str) or not os.path.lexists(value):
            continue
        if folders_allowed and os.path.isdir(value):
            continue
        try:
            require_regular_file(value, _flag(name))
        except PathError as exc:
            raise UsageError(str(exc)) from None
        except OSError:
            continue   # a dangling link: the command says the file is missing, in its own words


def _flag(name: str) -> str:
    return "the script" if name == "script" else f"--{name.replace('_', '-')}"


def prepare(args: argparse.Namespace) -> None:
    """Absolute paths and a usable device and timeout, or a UsageError; run before the script."""
    check_paths(args)
    for name in PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, os.path.abspath(os.path.expanduser(value)))
    for name in MAYBE_PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and os.path.exists(value):
            setattr(args, name, os.path.abspath(value))
    device = getattr(args, "device", None)
    if device not in (None, "auto"):
        check_device(device)
    resolve_model(args)


def resolve_model(args: argparse.Namespace) -> str | None:
    """Make ``args.script`` a model script: generated for a callable, a .pt2 or --weights (stderr says
    what gradviz invented; returned too). A weights file given as the model is a UsageError saying what to open."""
    script = getattr(args, "script", None)
    if not isinstance(script, str) or not hasattr(args, "input"):
        return None
    from gradviz.core.script.generated import model_source

    args.script, note = model_source(script, args.input, args.loss, args.weights, args.config)
    args.model_note = note
    args.model_name = script if note else None      # what the user named, for the commands' headers
    if note:
        say(f"gradviz: {note}")
    return note


def check_device(name: str) -> None:
    """A UsageError unless ``name`` is a device torch knows and this machine has."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"--device {name} is not a device: use cpu, cuda, cuda:N, mps or auto") from None
    if device.type == "meta":
        raise UsageError("--device meta: meta tensors have shapes but no values, so there are no gradients to show")
    if device.type == "cpu":
        return
    backend = getattr(torch, device.type, None)
    available = getattr(backend, "is_available", None)
    if available is None or not available():
        build = torch.__version__
        raise UsageError(f"--device {name}: this machine has no {device.type.upper()} device that torch {build} "
                         f"can use (torch.{device.type}.is_available() is False); use --device cpu")
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        raise UsageError(f"--device {name}: there are only {count()} {device.type} device(s) "
                         f"({device.type}:0..{device.type}:{count() - 1})")
