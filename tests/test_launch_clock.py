"""seconds_since_launch: the process's age from the kernel's record, what the window's
"graph on screen N s after launch" line (and bench_scale) count from."""
import subprocess
import sys
import time

import pytest

from gradviz.core.runtime.launch_clock import seconds_since_launch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_process_that_slept_half_a_second_is_at_least_that_old():
    code = ("import time; time.sleep(0.5)\n"
            "from gradviz.core.runtime.launch_clock import seconds_since_launch\n"
            "print(seconds_since_launch())")
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    lived = time.monotonic() - started
    age = float(out.stdout)
    assert 0.5 - 0.02 <= age <= lived + 0.02      # /proc counts in 10 ms ticks


def test_without_proc_there_is_no_answer_rather_than_a_wrong_one(monkeypatch):
    import builtins

    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path).startswith("/proc"):
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)
    monkeypatch.setattr(builtins, "open", no_proc)
    assert seconds_since_launch() is None
