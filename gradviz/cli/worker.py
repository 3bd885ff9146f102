"""The worker's side of ``cli/supervisor.py``: the process that runs the command and the user's script.

It is a fork of the ``gradviz`` process made before torch is imported. Its file descriptor 1 is a pipe to
the supervisor (gradviz's output: the supervisor copies it to the real stdout), and it tells the
supervisor, on a second pipe, one line per event: ``start`` (the script is about to run: ``--timeout``
counts from here), ``int`` (a Ctrl-C reached it), ``exit N`` (the command is done, exit status N). What it
is calling in the script is written to shared memory (``core/runtime/script_stage.py``), so the supervisor
can say where it was if the process dies. A copy that the user's script forks closes both pipes at once.
"""
from __future__ import annotations

import logging
import mmap
import os
import sys
import threading

from gradviz.cli import guard
from gradviz.core.runtime import ownership, script_stage
from gradviz.core.runtime.interrupts import on_script_start

log = logging.getLogger(__name__)

STAGE_BYTES = 4096


class Worker:
    def __init__(self, control_fd: int, lifeline_fd: int, stage: mmap.mmap) -> None:
        self.control_fd = control_fd
        self.lifeline_fd = lifeline_fd
        self.stage = stage

    def install(self) -> None:
        on_script_start(lambda: self.tell("start"))
        guard.interrupt_listeners.append(lambda: self.tell("int"))
        guard.exit_listeners.append(lambda status: self.tell(f"exit {status}"))
        script_stage.set_sink(self._stage)
        ownership.at_fork(self._forget)
        threading.Thread(target=self._watch_lifeline, name="gradviz-lifeline", daemon=True).start()

    def tell(self, line: str) -> None:
        if self.control_fd < 0:
            return
        try:
            os.write(self.control_fd, (line + "\n").encode())
        except OSError:
            log.debug("the supervisor is gone", exc_info=True)

    def finished(self, status: int) -> None:
        """The command is done: its output is flushed, later writes go to stderr, the supervisor is told."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass          # a reader gone away: the supervisor has said so already
        try:
            os.dup2(2, 1)     # an atexit handler's print must not reach gradviz's output after its end
        except OSError:
            log.debug("cannot point file descriptor 1 at stderr", exc_info=True)
        lingering = [t.name for t in threading.enumerate()
                     if t.is_alive() and not t.daemon and t is not threading.main_thread()]
        if lingering:
            log.debug("the script left %d thread(s) running (%s); gradviz does not wait for them",
                      len(lingering), ", ".join(lingering[:5]))
        log.debug("done; atexit handlers the script registered get %.0f s", LINGER_S)
        self.tell(f"exit {status}")

    def _stage(self, text: str) -> None:
        data = text.encode("utf-8", "replace")[:STAGE_BYTES - 4]
        self.stage[:4] = len(data).to_bytes(4, "little")
        self.stage[4:4 + len(data)] = data

    def _forget(self) -> None:
        """In a copy the script forked: not the worker; it tells the supervisor nothing."""
        for fd in (self.control_fd, self.lifeline_fd):
            try:
                os.close(fd)
            except OSError:
                pass     # already closed
        self.control_fd = self.lifeline_fd = -1
        script_stage.set_sink(None)

    def _watch_lifeline(self) -> None:
        """End this process when the supervisor is gone (its end of the lifeline closes)."""
        fd = self.lifeline_fd
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            return
        if fd == self.lifeline_fd:    # not a copy that closed it
            os._exit(guard.EXIT_INTERRUPTED)


def read_stage(stage: mmap.mmap) -> str | None:
    size = int.from_bytes(stage[:4], "little")
    if not 0 < size <= STAGE_BYTES - 4:
        return None
    return stage[4:4 + size].decode("utf-8", "replace")


LINGER_S = 2.0    # after its result, how long the worker may run atexit handlers and threads before it is ended
