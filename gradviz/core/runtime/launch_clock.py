"""How long ago this process started, from the kernel's own record (Linux ``/proc``).

The window logs "graph on screen N s after launch" with it (``gradviz -v``), and
``benchmarks/bench_scale.py`` reads that line: the time a user waits from pressing Enter to
seeing the graph, without the screenshot's settling and the process's exit.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

_START_TIME_FIELD = 19      # starttime is field 22 of /proc/PID/stat; we count from field 3 (after "comm)")


def seconds_since_launch() -> float | None:
    """Seconds since this process was started (10 ms resolution), or None where /proc is not there."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rpartition(")")[2].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[_START_TIME_FIELD]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        log.debug("no process start time on this system", exc_info=True)
        return None
