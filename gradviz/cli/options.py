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

from gradviz.core.errors import GradvizError

__all__ = ["USER_CODE_COMMANDS", "UsageError", "add_common_options", "prepare", "configure_logging"]

# the commands that import and run a user's script (they get --timeout and the guard's stdout routing)
USER_CODE_COMMANDS = ("export", "check", "gradcheck", "train", "attribute")
# argument names that hold paths of files gradviz reads or writes; and those that may (a file, or
# something else: a PACKAGE.MODULE:CALLABLE, a number)
PATH_ARGS = ("output", "weights")
MAYBE_PATH_ARGS = ("script", "baseline")


class UsageError(GradvizError):
    """A command-line value that cannot work (exit 2, before anything runs)."""


def add_common_options(parser: argparse.ArgumentParser, runs_user_code: bool) -> None:
    # SUPPRESS: a sub-command that does not see the flag must not reset one given before it
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log what gradviz does (and the traceback of an internal error) on stderr")
    if runs_user_code:
        parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                            help="stop the script after SECONDS (exit 2, naming the line it was at)")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record (a test's redirect, the guard's routing)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("gradviz: %(levelname)s: %(name)s: %(message)s"))

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
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False   # a script's logging.basicConfig must not print gradviz's records twice


def prepare(args: argparse.Namespace) -> None:
    """Absolute paths and a usable device and timeout, or a UsageError; run before the script."""
    for name in PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and value:
            setattr(args, name, os.path.abspath(os.path.expanduser(value)))
    for name in MAYBE_PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and os.path.exists(value):
            setattr(args, name, os.path.abspath(value))
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, not {timeout:g}")
    device = getattr(args, "device", None)
    if device not in (None, "auto"):
        check_device(device)


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
