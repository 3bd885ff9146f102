"""Run ▸ Run a training script…: ``gradviz run`` in a child process, then the run opens like any other.

The script runs in its own process (``QProcess``: the UI thread never waits, and a script that crashes or
hangs cannot take the window with it): ``python -m gradviz run -o RUN --steps N SCRIPT ARGS``. Its output
goes to the window's log; when it ends, ``RUN`` is opened (``open_run_file``), findings included. The
arguments typed are split like a shell would (``shlex``) and passed as argv -- never run as code.
"""
from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QProcess
from PySide6.QtWidgets import QFileDialog, QInputDialog, QWidget

log = logging.getLogger(__name__)

__all__ = ["ScriptRun", "run_command"]

DEFAULT_STEPS = 200


def run_command(script: str | Path, args: list[str], run_path: str | Path, steps: int | None) -> list[str]:
    """The child's argv after the interpreter: ``-m gradviz run ...`` (gradviz's options before SCRIPT)."""
    cmd = ["-m", "gradviz", "run", "-o", str(run_path)]
    if steps:
        cmd += ["--steps", str(int(steps))]
    return cmd + [str(script), *args]


class ScriptRun:
    """One ``gradviz run`` child at a time; ``on_done(run_path, exit_code, output)`` when it ends."""

    def __init__(self, parent: QWidget, on_done: Callable[[Path, int, str], None]) -> None:
        self.parent = parent
        self.on_done = on_done
        self.process: QProcess | None = None
        self.run_path: Path | None = None
        self._output: list[str] = []

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.state() != QProcess.NotRunning

    def ask_and_start(self) -> bool:
        """The file dialog, the arguments and the steps, then ``start``; False when cancelled or busy."""
        if self.running:
            return False
        script, _ = QFileDialog.getOpenFileName(self.parent, "Run a training script", str(Path.cwd()),
                                                "Python scripts (*.py)")
        if not script:
            return False
        text, ok = QInputDialog.getText(self.parent, "Run a training script",
                                        "The script's arguments (as on the command line):")
        if not ok:
            return False
        steps, ok = QInputDialog.getInt(self.parent, "Run a training script",
                                        "Stop after this many optimizer steps (0: let the script end):",
                                        DEFAULT_STEPS, 0, 10_000_000)
        if not ok:
            return False
        try:
            args = shlex.split(text)
        except ValueError as exc:        # an unclosed quote: said, nothing started
            log.warning("cannot split the arguments: %s", exc)
            return False
        return self.start(script, args, steps or None)

    def start(self, script: str | Path, args: list[str], steps: int | None,
              run_path: str | Path | None = None) -> bool:
        if self.running:
            return False
        script = Path(script).resolve()
        self.run_path = Path(run_path) if run_path else script.with_suffix(".gvrun")
        self._output = []
        proc = QProcess(self.parent)
        proc.setWorkingDirectory(str(script.parent))
        proc.setProcessChannelMode(QProcess.MergedChannels)
        proc.readyReadStandardOutput.connect(self._read)
        proc.finished.connect(self._finished)
        self.process = proc
        proc.start(sys.executable, run_command(script, args, self.run_path, steps))
        return True

    def _read(self) -> None:
        if self.process is not None:
            text = bytes(self.process.readAllStandardOutput()).decode("utf-8", "replace")
            self._output.append(text)
            for line in text.splitlines():
                log.info("gradviz run: %s", line)

    def _finished(self, code: int, status) -> None:
        self._read()
        self.on_done(self.run_path, int(code), "".join(self._output))
