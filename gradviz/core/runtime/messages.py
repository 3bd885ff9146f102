"""Text that gradviz prints as one message: one line, no terminal control, bounded.

An exception's message is text the user's code (or a file) chose: it may hold newlines, ANSI escape
sequences that recolour or retitle the terminal, NULs, or 200 KB of data. ``one_line`` makes it what a
message line may be: whitespace runs with a line break become `` | ``, escape sequences and other control
characters are removed, and a message longer than ``limit`` characters is cut with "…".
"""
from __future__ import annotations

import re

__all__ = ["one_line", "short_path", "MESSAGE_LIMIT"]

MESSAGE_LIMIT = 1000
# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), other two-character escapes, and their 8-bit forms
_ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|\x1b[@-Z\\-_]|\x1b")
_BREAKS = re.compile(r"\s*[\r\n\f\v\u2028\u2029\x85]+\s*")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def one_line(text: object, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` as one printable line of at most ``limit`` characters (see the module docstring)."""
    try:
        text = str(text)
    except Exception as exc:  # an exception whose __str__ raises: say so rather than fail to report it
        text = f"<unprintable message: {type(exc).__name__}>"
    if len(text) > 8 * limit:   # bound the work on a huge message before the regular expressions run
        text = text[:8 * limit]
    text = _ESCAPES.sub("", text)
    text = _BREAKS.sub(" | ", text.strip())
    text = _CONTROL.sub("", text.replace("\t", " "))
    if len(text) > limit:
        text = text[:limit - 1].rstrip() + "…"
    return text


def short_path(path: object, limit: int = 160) -> str:
    """A path for a message: one line, and a long one cut in its middle (its start and its name stay)."""
    text = one_line(path if not isinstance(path, bytes) else path.decode(errors="replace"), 10 * limit)
    if len(text) <= limit:
        return text
    keep = (limit - 1) // 2
    return f"{text[:keep]}…{text[-keep:]}"
