"""The one guard every command runs under: what a user's script may do to the CLI, and what it may not.

While a command that runs the user's code (``export``, ``check``, ``gradcheck``, ``train``) is
running:

- the user's stdout goes to stderr (Python's ``print`` and writes to file descriptor 1 from C
  or a subprocess alike), so gradviz's own output, written to ``out()``, stays machine-readable:
  ``--json`` prints exactly one JSON object (``train --json``: JSON lines);
- ``--timeout SECONDS`` stops the script (SIGALRM raises ``TimedOut`` where it is; a watchdog
  ends the process if the script swallows that or sits in C code), and Ctrl-C raises
  ``Interrupted``; both messages name the ``file:line`` where the script was;
- whatever escapes becomes one message and an exit status, never a traceback: a
  ``GradvizError`` (its own message) or a failure of the user's code (``sys.exit()``, a
  ``KeyboardInterrupt`` the script raised, an exception from a user frame) → 2, a timeout → 2,
  Ctrl-C → 130, anything else is a bug in gradviz → 1 with a short message (``--verbose``
  logs the traceback).
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import sys
import threading
from typing import Callable, Iterator, TextIO

from gradviz.core.runtime.errors import GradvizError
from gradviz.core.runtime.interrupts import (Interrupted, Stopped, TimedOut, describe_exception, on_script_start,
                                     where_user_code_is)
from gradviz.core.runtime.locations import user_frame_of
from gradviz.core.runtime.messages import MESSAGE_LIMIT, one_line, short_path
from gradviz.core.runtime.ownership import at_fork, claim, release

log = logging.getLogger(__name__)

__all__ = ["out", "run_guarded", "EXIT_OK", "EXIT_SCRIPT", "EXIT_BUG", "EXIT_INTERRUPTED", "EXIT_PIPE"]

EXIT_OK, EXIT_BUG, EXIT_SCRIPT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
WATCHDOG_GRACE_S = 5.0   # after a timeout, how long the script may ignore TimedOut before the process ends

_out: TextIO | None = None
interrupt_listeners: list[Callable[[], None]] = []   # told of each Ctrl-C the command receives (the supervisor)
exit_listeners: list[Callable[[int], None]] = []      # told of the status before a hard exit (the supervisor)


def out() -> TextIO:
    """Where gradviz writes its results: the real stdout, also while the user's prints go to stderr."""
    return _out if _out is not None else sys.stdout


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[TextIO]:
    """Send the user's stdout to stderr; yield (and serve through ``out()``) the real stdout.

    At the file-descriptor level when stdout is fd 1 (C extensions, ``os.system``), else (a
    test's ``redirect_stdout``) at the Python level only.
    """
    global _out
    before = sys.stdout
    real, saved_fd = before, None
    with contextlib.suppress(AttributeError, OSError, ValueError):
        before.flush()
        if before.fileno() == 1:
            sys.stderr.flush()
            saved_fd = os.dup(1)
            real = os.fdopen(saved_fd, "w", buffering=1, encoding=before.encoding, errors=before.errors)
            os.dup2(sys.stderr.fileno(), 1)
    _out, sys.stdout = real, sys.stderr
    try:
        yield real
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
            real.flush()
        sys.stdout, _out = before, None
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            real.close()


class _Stops:
    """SIGINT → ``Interrupted``, SIGALRM after ``timeout`` s → ``TimedOut``, and a watchdog.

    Signals can only be handled in the main thread; elsewhere (an embedding program) this
    does nothing. A second Ctrl-C, or a script still running ``WATCHDOG_GRACE_S`` after its
    timeout (it caught ``TimedOut``, or sits in a long C call), ends the process at once via
    ``hard_exit``.
    """

    def __init__(self, timeout: float | None, hard_exit: Callable[[Stopped], None]) -> None:
        self.timeout = timeout
        self.hard_exit = hard_exit
        self.interrupts = 0
        self.done = threading.Event()
        self.saved: dict[int, object] = {}
        self.alarm = False
        self.started = False

    def __enter__(self) -> _Stops:
        if threading.current_thread() is threading.main_thread():
            self.saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def start_timer(self) -> None:
        """Start counting ``timeout`` from now: called when the script is about to run (once)."""
        if self.alarm or self.started or not self.timeout or threading.current_thread() is not threading.main_thread():
            return
        self.started = True
        if hasattr(signal, "setitimer"):
            self.saved[signal.SIGALRM] = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
            self.alarm = True
        main = threading.main_thread().ident
        threading.Thread(target=self._watchdog, args=(main,), name="gradviz-timeout", daemon=True).start()

    def __exit__(self, *exc_info) -> None:
        self.done.set()
        if self.alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)

    def _timed_out(self, location: str | None) -> TimedOut:
        return TimedOut(location, detail=f" after {self.timeout:g} s (--timeout)")

    def _on_alarm(self, signum, frame) -> None:
        raise self._timed_out(where_user_code_is(frame))

    def _on_sigint(self, signum, frame) -> None:
        for listener in list(interrupt_listeners):
            listener()
        self.interrupts += 1
        stop = Interrupted(where_user_code_is(frame))
        if self.interrupts > 1:   # the first one did not stop it: the user insists
            self.hard_exit(stop)
        raise stop

    def _watchdog(self, main_ident: int) -> None:
        # without SIGALRM (Windows) this is the timeout itself; with it, the backstop
        wait = self.timeout + (WATCHDOG_GRACE_S if hasattr(signal, "setitimer") else 0.0)
        if self.done.wait(wait):
            return
        frame = sys._current_frames().get(main_ident)
        self.hard_exit(self._timed_out(where_user_code_is(frame)))


def _user_frame(exc: BaseException) -> str | None:
    """``file:line`` of the innermost user frame in ``exc``'s traceback (None: it never reached user code)."""
    found = user_frame_of(exc.__traceback__)
    return f"{found[0]}:{found[1]}" if found else None


def _out_of_memory(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return isinstance(exc, MemoryError) or (oom is not None and isinstance(exc, oom))


# errors of the file system a path met (none of them a bug in gradviz)
ENVIRONMENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENAMETOOLONG", "ENOTDIR", "EISDIR", "EACCES", "EPERM", "EROFS", "ENOSPC", "EDQUOT", "ENOENT", "ELOOP",
    "EEXIST", "EMFILE", "ENFILE", "EIO", "ETXTBSY", "EFBIG", "ENXIO", "ENODEV", "EXDEV") if hasattr(errno, name))


def classify(exc: BaseException) -> tuple[int, str, str, str | None]:
    """``(exit status, code, message, location)`` for an exception that escaped a command."""
    if isinstance(exc, TimedOut):
        return EXIT_SCRIPT, "timeout", str(exc), exc.location
    if isinstance(exc, Interrupted):
        return EXIT_INTERRUPTED, "interrupted", str(exc), exc.location
    if isinstance(exc, GradvizError):
        location = getattr(exc, "location", None)
        message = getattr(exc, "message", None) or str(exc)
        return EXIT_SCRIPT, getattr(exc, "code", "error"), message, location
    if _out_of_memory(exc):
        return EXIT_SCRIPT, "out-of-memory", f"out of memory: {type(exc).__name__}: {exc}", _user_frame(exc)
    location = _user_frame(exc)
    if location is not None or isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return EXIT_SCRIPT, "script-error", f"the script stopped gradviz: {describe_exception(exc)}", location
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS:
        # a path that cannot be used (too long, not a folder, read-only, disk full): the machine's answer,
        # not a bug of gradviz's
        where = f" {short_path(exc.filename)}" if exc.filename else ""
        return EXIT_SCRIPT, "file-error", f"cannot use{where}: {exc.strerror or exc}", None
    return (EXIT_BUG, "internal-error", f"internal error: {type(exc).__name__}: {exc} — this is a bug in gradviz; "
            "please report it (run again with --verbose for the traceback)", None)


def report(exc: BaseException, command: str, script: str | None, as_json: bool) -> int:
    """Print one message for ``exc`` (and one JSON object with ``as_json``); return the exit status."""
    status, code, message, location = classify(exc)
    log.debug("%s stopped by %s", command, type(exc).__name__, exc_info=exc)  # the traceback, with --verbose
    message, location = one_line(message), one_line(location) if location else location
    text = f"{location}: {message}" if location and not isinstance(exc, Stopped) else message
    print(one_line(f"gradviz {command}: {text}", 2 * MESSAGE_LIMIT), file=sys.stderr, flush=True)
    if as_json:
        finding = {"code": code, "severity": "error", "message": message, "params": [], "modules": [],
                   "nodes": [], "location": location, "edges": [], "data": {}}
        doc = {"script": script, "ok": False, "error": text, "code": code, "location": location,
               "findings": [finding]}
        try:
            print(json.dumps(doc), file=out(), flush=True)
        except OSError as exc:
            if not closed_output(exc):
                raise
            end_quietly()     # the message is on stderr; stdout's reader is gone
    return status


def run_guarded(command: str, fn: Callable[[], int | None], *, setup: Callable[[], None] = lambda: None,
                script: Callable[[], str | None] = lambda: None, as_json: bool = False,
                timeout: float | None = None, user_code: bool = True) -> int:
    """Run a command's ``fn``; the user's code inside it cannot break the CLI's promises (module docstring).

    ``setup`` runs first, outside the ``timeout`` (checks of the arguments, gradviz's own imports);
    ``script`` gives the script's name for the JSON error object (asked late: ``setup`` resolves it).
    """
    def hard_exit(stop: Stopped) -> None:
        status = EXIT_INTERRUPTED if isinstance(stop, Interrupted) else EXIT_SCRIPT
        with contextlib.suppress(Exception):
            report(stop, command, script(), as_json)
            sys.stderr.flush()
            out().flush()
        for listener in list(exit_listeners):
            with contextlib.suppress(Exception):
                listener(status)
        os._exit(status)

    redirect = stdout_to_stderr() if user_code else contextlib.nullcontext()
    owned = _owned() if user_code else contextlib.nullcontext()
    try:
        with redirect, owned, _Stops(timeout if user_code else None, hard_exit) as stops:
            setup()
            remove = on_script_start(stops.start_timer)   # the clock starts with the script, not gradviz
            try:
                status = int(fn() or 0)
                flush_output()    # a reader that went away shows here, not in the interpreter's last flush
                return status
            finally:
                remove()
    except BaseException as exc:  # noqa: BLE001 - every escape becomes one message and an exit status
        if isinstance(exc, SystemExit) and not user_code:
            raise   # argparse-style exits of gradviz's own commands
        if closed_output(exc):
            return end_quietly()
        return report(exc, command, script(), as_json)


@contextlib.contextmanager
def _owned() -> Iterator[None]:
    """This process does the command's work; a fork of it (``os.fork()`` in the script) writes nothing to
    gradviz's output and ends when it comes back into gradviz (``core/runtime/ownership.py``)."""
    claim()
    remove = at_fork(_silence_copy)
    try:
        yield
    finally:
        remove()
        release()


def _silence_copy() -> None:
    """In a fork's child: gradviz's stdout (the real one) becomes /dev/null there."""
    try:
        fd = _out.fileno() if _out is not None else None
    except (OSError, ValueError, AttributeError):
        fd = None          # a Python-level stream (a test's): the copy's writes stay in its own memory
    if fd is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def flush_output() -> None:
    for stream in (out(), sys.stdout):
        if stream is not None and not getattr(stream, "closed", False):
            stream.flush()


def closed_output(exc: BaseException) -> bool:
    """``exc`` is gradviz's own write into a stdout whose reader is gone (``| head``, ``| true``)."""
    return (isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)) \
        and _user_frame(exc) is None


def end_quietly() -> int:
    """Nobody reads stdout any more: say nothing, make the interpreter's last flush harmless, exit 141
    (128 + SIGPIPE, what a shell reports for a program a closed pipe ended)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    log.debug("stdout was closed by its reader: stopped writing")
    return EXIT_PIPE
