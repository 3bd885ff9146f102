"""``say(text)``: one message line on stderr, as every command prints its refusals and notes.

The text is made one clean line first (``core/runtime/messages.one_line``: no newlines, no terminal
escape sequences, at most 1,000 characters), whatever an exception or a file name put in it.
"""
from __future__ import annotations

import sys

from gradviz.core.runtime.messages import one_line

__all__ = ["say"]


def say(text: object) -> None:
    print(one_line(text), file=sys.stderr, flush=True)
