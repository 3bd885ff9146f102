"""Stops that gradviz itself puts into a user's running code: a timeout and Ctrl-C.

The CLI's guard (``gradviz/cli/guard.py``) raises these from signal handlers while the
user's script runs. They carry the ``file:line`` where the script was when it was
stopped, so the message can say where a ``batch()`` hung. Both derive from
``BaseException`` so that a script's ``except Exception:`` does not swallow them, and
the code that wraps the user's functions (``core/script/load.py``) lets them through
unchanged: they are not the script's fault, unlike a ``SystemExit`` or a
``KeyboardInterrupt`` the script raises itself.
"""
from __future__ import annotations

from types import FrameType
from typing import Callable

from gradviz.core.runtime.locations import GRADVIZ_DIR, is_user_file

__all__ = ["Stopped", "TimedOut", "Interrupted", "where_user_code_is", "describe_exception", "on_script_start",
           "script_starting"]

_script_start: list[Callable[[], None]] = []


def on_script_start(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` when a user's script is about to run (``load_script``); returns its remover.

    The CLI's ``--timeout`` counts from there: gradviz's own start-up is not the script's time.
    """
    _script_start.append(callback)
    return lambda: _script_start.remove(callback) if callback in _script_start else None


def script_starting() -> None:
    for callback in list(_script_start):
        callback()


class Stopped(BaseException):
    """gradviz stopped the user's code at ``location`` (``file:line``; None if unknown) in ``function``."""

    reason = "stopped"

    def __init__(self, where: tuple[str, str, bool] | None = None, detail: str = "") -> None:
        super().__init__(where, detail)
        self.location, self.function, self.in_script = where if where else (None, "", False)
        self.detail = detail

    def __str__(self) -> str:
        if self.location is None:
            return f"{self.reason}{self.detail}"
        whose = "the script was at" if self.in_script else "gradviz was at"
        return f"{self.reason}{self.detail}; {whose} {self.location} (in {self.function})"


class TimedOut(Stopped):
    """The ``--timeout`` ran out."""

    reason = "timed out"


class Interrupted(Stopped, KeyboardInterrupt):
    """Ctrl-C (SIGINT) while gradviz ran: a KeyboardInterrupt, so generic cleanup still runs."""

    reason = "interrupted (Ctrl-C)"


def where_user_code_is(frame: FrameType | None) -> tuple[str, str, bool] | None:
    """``(file:line, function, True)`` of the innermost frame of user code on ``frame``'s stack.

    When no user frame is on the stack (gradviz was running its own step), the innermost
    frame of gradviz (else of a library) with ``False``; None without a frame.
    """
    innermost, ours = frame, None
    while frame is not None:
        code = frame.f_code
        if is_user_file(code.co_filename):
            return f"{code.co_filename}:{frame.f_lineno}", code.co_name, True
        if ours is None and code.co_filename.startswith(GRADVIZ_DIR):
            ours = frame
        frame = frame.f_back
    frame = ours or innermost    # which step of gradviz's says more than a frame deep in a library
    if frame is None:
        return None
    return f"{frame.f_code.co_filename}:{frame.f_lineno}", frame.f_code.co_name, False


def describe_exception(exc: BaseException) -> str:
    """``Type: message``, with the two exits a script can take by itself spelled out."""
    if isinstance(exc, SystemExit):
        return (f"SystemExit: the script called sys.exit({exc.code!r}) (or exit()); gradviz runs the script's "
                "functions in its own process, so they must return or raise, not exit")
    if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Stopped):
        return "KeyboardInterrupt raised by the script itself (not a Ctrl-C)"
    try:
        text = str(exc)
    except Exception as inner:  # noqa: BLE001 - the script's exception cannot even say what it is
        text = f"(its message cannot be shown: its __str__ raised {type(inner).__name__})"
    return f"{type(exc).__name__}: {text}"
