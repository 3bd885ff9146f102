"""The types of the command line's numbers: each value in its range, or one line saying which range.

argparse's ``type=float`` takes ``nan``, ``inf`` and ``-1`` for a clip norm, and ``type=int`` any size; every
numeric option of gradviz is declared with one of these instead, so a value that cannot work is refused
before anything runs (exit 2, ``gradviz train: argument --clip: ...``). ``OneLineParser`` makes every
refusal of the parser one line (argparse prints its usage block first).
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Callable, NoReturn

from gradviz.core.runtime.messages import one_line

__all__ = ["OneLineParser", "integer", "real", "depth", "window_size", "MAX_STEPS", "MAX_STEP", "MAX_SECONDS", "MAX_SEED"]

MAX_STEPS = 10 ** 9            # a loop of a billion steps is a typo or a test of gradviz, not training
MAX_SECONDS = 10 ** 7          # about 115 days: beyond it timers overflow the platform's time_t
MAX_SEED = 2 ** 64 - 1         # torch.manual_seed's range
MAX_STEP = 2 ** 62             # batch(step) seeds generators with it: an int64 with room to add


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``PROG: MESSAGE (PROG --help)``, exit 2."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)     # "--clip must be ...", not "argument --clip: ..."
        print(f"{self.prog}: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _fail(text: str, what: str) -> NoReturn:
    raise argparse.ArgumentTypeError(f"{what}, not {one_line(text, 60)!r}")


def integer(low: int = 0, high: int = MAX_STEPS) -> Callable[[str], int]:
    """An integer in ``[low, high]``."""
    what = f"must be an integer from {low:,} to {high:,}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            _fail(text, what)
        if not low <= value <= high:
            _fail(text, what)
        return value
    parse.__name__ = "integer"
    return parse


def real(low: float = 0.0, high: float = math.inf, *, above: bool = True) -> Callable[[str], float]:
    """A finite number ``> low`` (``>= low`` when not ``above``) and ``<= high``."""
    if low == 0:
        what = "must be a positive number" if above else "must be a number from 0"
    else:
        what = f"must be a number above {low:g}" if above else f"must be a number from {low:g}"
    what += f" up to {high:g}" if math.isfinite(high) else " (finite)"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            _fail(text, what)
        if not math.isfinite(value) or value > high or (value <= low if above else value < low):
            _fail(text, what)
        return value
    parse.__name__ = "number"
    return parse


def depth(text: str) -> str:
    """``--collapse``: ``auto`` or an integer depth from 0 (kept as text; the command reads it)."""
    if text.strip().lower() == "auto":
        return "auto"
    return str(integer(0, 10_000)(text))


def window_size(text: str) -> str:
    """``--size WxH``: two integers from 100 to 20,000."""
    width, sep, height = text.lower().partition("x")
    try:
        w, h = int(width), int(height)
    except ValueError:
        w = h = 0
    if not sep or not (100 <= w <= 20_000 and 100 <= h <= 20_000):
        _fail(text, "must be WIDTHxHEIGHT in pixels, each from 100 to 20,000")
    return f"{w}x{h}"
