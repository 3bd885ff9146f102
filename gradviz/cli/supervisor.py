"""``gradviz`` as a process: a small supervisor that owns the exit and the output, and a worker that runs.

A command that runs a user's script (``export``, ``check``, ``gradcheck``, ``train``, ``attribute``)
is run in a worker process forked from this one before torch is imported (``cli/worker.py``); this
process only copies the worker's output to stdout and waits. So whatever the script does to its own
process, gradviz keeps its promises:

- ``os._exit(7)`` in ``loss_fn``, a segfault in a C extension, the out-of-memory killer: the worker is
  gone without a result, and this process says so in one line naming what gradviz was calling
  (``--json``: the one JSON object), exit status 2;
- a non-daemon thread or an ``atexit`` handler that never returns: once the worker has reported its
  exit status, it gets ``LINGER_S`` seconds to end, then it is ended (``--verbose`` says so);
- ``--timeout`` bounds the whole process: past the timeout and the worker's own watchdog, it is ended;
- a fork in the script cannot write to gradviz's output (the copies close it) and ends when it returns
  into gradviz (``core/runtime/ownership.py``);
- a closed stdout (``| head``) ends the worker at once, quietly (exit 141).

Ctrl-C reaches the worker (forwarded when only this process got it, e.g. ``kill -INT``), which names the
line the script was at. Where there is no ``fork`` (Windows) the command runs in this process, as
``main()`` does when called from Python (tests, notebooks).
"""
from __future__ import annotations

import contextlib
import errno
import io
import logging
import mmap
import os
import selectors
import signal
import sys
import time

from gradviz.cli import guard
from gradviz.cli.worker import LINGER_S, Worker, read_stage
from gradviz.core.runtime.errors import GradvizError

log = logging.getLogger(__name__)

__all__ = ["entry", "supervise"]

FORWARD_DELAY_S = 0.3      # a Ctrl-C the worker has not reported by then is forwarded to it
BACKSTOP_S = 10.0          # past --timeout plus the worker's own watchdog grace


class ProcessEnded(GradvizError):
    """The worker ended without a result (the script ended its process, or it crashed)."""

    code = "process-exit"

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.location = location


def entry() -> int:
    """The console script and ``python -m gradviz``: supervise a command that runs user code, else run it."""
    from gradviz.cli.main import GLOBAL_FLAGS, main
    from gradviz.cli.options import USER_CODE_COMMANDS

    argv = sys.argv[1:]
    words = [a for a in argv if a not in GLOBAL_FLAGS]
    if words and words[0] in USER_CODE_COMMANDS and hasattr(os, "fork") and not {"-h", "--help"} & set(words) \
            and os.environ.get("GRADVIZ_SUPERVISE", "1") != "0":
        return supervise(argv, words[0])
    return main()


def _options(argv: list[str]) -> tuple[bool, float | None, bool, str | None]:
    """``--json``, ``--timeout``, ``--verbose`` and the script as given (the worker parses them properly)."""
    from gradviz.cli.main import build_parser

    words = [a for a in argv if a not in ("-v", "--verbose")]
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args, _ = build_parser().parse_known_args(words)
    except SystemExit:
        return False, None, False, None      # the worker will refuse them in its own words
    verbose = len(words) != len(argv) or bool(getattr(args, "verbose", False))
    return bool(getattr(args, "json", False)), getattr(args, "timeout", None), verbose, getattr(args, "script", None)


def supervise(argv: list[str], command: str) -> int:
    as_json, timeout, verbose, script = _options(argv)
    data_r, data_w = os.pipe()
    control_r, control_w = os.pipe()
    lifeline_r, lifeline_w = os.pipe()
    stage = mmap.mmap(-1, 4096)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:                                   # the worker
        from gradviz.cli.main import main

        os.close(data_r)
        os.close(control_r)
        os.close(lifeline_w)
        os.dup2(data_w, 1)
        os.close(data_w)
        worker = Worker(control_w, lifeline_r, stage)
        worker.install()
        status = 1
        try:
            status = main()
        except SystemExit as exc:                  # not from gradviz's commands (they return), but said all the same
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            worker.finished(status)
        return status                              # a normal end: threads joined, atexit run (bounded)
    os.close(data_w)
    os.close(control_w)
    os.close(lifeline_r)
    if verbose:
        from gradviz.cli.options import configure_logging

        configure_logging(True)
    return _Supervisor(pid, data_r, control_r, stage, command, as_json, timeout, script).run()


class _Supervisor:
    def __init__(self, pid: int, data_fd: int, control_fd: int, stage: mmap.mmap, command: str,
                 as_json: bool, timeout: float | None, script: str | None) -> None:
        self.pid, self.data_fd, self.control_fd, self.stage = pid, data_fd, control_fd, stage
        self.command, self.as_json, self.timeout, self.script = command, as_json, timeout, script
        self.status: int | None = None
        self.deadline: float | None = None       # --timeout's backstop, from the script's start
        self.linger_until: float | None = None
        self.wait_status: int | None = None
        self.sigint_at: float | None = None
        self.worker_saw_int = 0.0
        self.signalled: int | None = None        # SIGTERM / SIGHUP this process got and passed on
        self.pending = b""

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return self._loop()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGINT:
            self.sigint_at = time.monotonic()
        else:
            self.signalled = signum
            self._kill(signum)

    def _loop(self) -> int:
        selector = selectors.DefaultSelector()
        selector.register(self.data_fd, selectors.EVENT_READ)
        selector.register(self.control_fd, selectors.EVENT_READ)
        open_fds = {self.data_fd, self.control_fd}
        while True:
            for key, _ in selector.select(timeout=0.1):
                if not self._read(key.fd):
                    selector.unregister(key.fd)
                    open_fds.discard(key.fd)
            if self._copy_failed:
                self._kill(signal.SIGKILL)
                self._reap(block=True)
                return guard.end_quietly()
            if not open_fds:
                time.sleep(0.1)      # both pipes closed (the worker is ending, or its script closed them)
            self._forward_sigint()
            self._reap(block=False)
            now = time.monotonic()
            if self.wait_status is not None:
                self._drain()
                return self._outcome()
            if self.linger_until is not None and now > self.linger_until:
                log.debug("the script's process was still running %.0f s after the command finished (a non-daemon "
                          "thread or an atexit handler): ended it", LINGER_S)
                self._kill(signal.SIGKILL)
                self._reap(block=True)
                return self.status
            if self.deadline is not None and now > self.deadline and self.status is None:
                self._kill(signal.SIGKILL)
                self._reap(block=True)
                where = read_stage(self.stage)
                return guard.report(ProcessEnded(f"timed out after {self.timeout:g} s (--timeout)"
                                                 + (f"; gradviz was calling {where}" if where else "")),
                                    self.command, self.script, self.as_json)

    _copy_failed = False

    def _read(self, fd: int) -> bool:
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return True
            raise
        if not chunk:
            return False
        if fd == self.data_fd:
            self._copy(chunk)
        else:
            self._control(chunk)
        return True

    def _copy(self, chunk: bytes) -> None:
        if self._copy_failed:
            return
        out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
        try:
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sys.stdout.write(chunk.decode(errors="replace"))
                sys.stdout.flush()
        except OSError as exc:
            if not guard.closed_output(exc):
                raise
            self._copy_failed = True

    def _control(self, chunk: bytes) -> None:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            word, _, rest = line.decode(errors="replace").partition(" ")
            if word == "start" and self.timeout:
                self.deadline = time.monotonic() + self.timeout + guard.WATCHDOG_GRACE_S + BACKSTOP_S
            elif word == "int":
                self.worker_saw_int = time.monotonic()
            elif word == "exit" and rest.strip().lstrip("-").isdigit():
                self.status = int(rest)
                self.linger_until = time.monotonic() + LINGER_S
                self._drain()

    def _drain(self) -> None:
        """Copy what the worker wrote before it reported (it is in the pipe already)."""
        os.set_blocking(self.data_fd, False)
        try:
            while True:
                chunk = os.read(self.data_fd, 1 << 16)
                if not chunk:
                    break
                self._copy(chunk)
        except (BlockingIOError, OSError):
            pass        # nothing more there now
        finally:
            os.set_blocking(self.data_fd, True)

    def _forward_sigint(self) -> None:
        if self.sigint_at is None or time.monotonic() - self.sigint_at < FORWARD_DELAY_S:
            return
        if self.worker_saw_int < self.sigint_at:      # it came to this process only (kill -INT): pass it on
            self._kill(signal.SIGINT)
        self.sigint_at = None

    def _kill(self, signum: int) -> None:
        if self.wait_status is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass    # already gone; _reap collects it

    def _reap(self, block: bool) -> None:
        if self.wait_status is not None:
            return
        while True:
            try:
                pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                self.wait_status = 0
                return
            except InterruptedError:
                continue
            if pid:
                self.wait_status = status
            return

    def _outcome(self) -> int:
        if self.status is not None:
            return self.status
        if self.signalled is not None:
            return 128 + self.signalled
        status = self.wait_status or 0
        where = read_stage(self.stage)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            name = signal.Signals(sig).name if sig in signal.valid_signals() else f"signal {sig}"
            why = {signal.SIGSEGV: "a crash in native code", signal.SIGBUS: "a crash in native code",
                   signal.SIGABRT: "an abort in native code",
                   signal.SIGKILL: "the out-of-memory killer, or the script itself"}.get(sig, "a signal")
            how = f"was killed by {name} ({why})"
        else:
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
            how = f"ended with exit status {code} (os._exit() in the script, or a crash in native code)"
        text = (f"the process running the script {how} before gradviz finished"
                + (f", while gradviz was calling {where}" if where else "") + "; no result was written")
        return guard.report(ProcessEnded(text), self.command, self.script, self.as_json)
