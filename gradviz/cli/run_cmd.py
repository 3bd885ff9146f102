"""``gradviz run SCRIPT.py [ARGS...]``: run the user's own training script, unmodified, and record it.

The script runs as ``python SCRIPT.py ARGS`` would run it -- ``__main__``, ``sys.argv``, its folder first on
``sys.path`` -- in the supervised worker (``cli/supervisor.py``: a script that ends its process or hangs
still gets one line). ``core/record/script_recorder.py`` finds the model and the loss and records them like
``watch``; the loop doctor (``core/loop``) checks the loop. At the end the findings are printed, read back
from the run file (what ``gradviz runs show`` prints). Exit status: 0 the script ended (or ``--steps`` was
reached), 1 it raised (the exception is a finding too), 2 gradviz could not run it.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys

from gradviz.cli import guard
from gradviz.cli.arg_types import integer
from gradviz.cli.say import say


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run a training script unmodified and record it (loop findings at the end)",
                       description="Run SCRIPT.py [ARGS...] as `python SCRIPT.py ARGS` would, record the model "
                       "its optimizer steps (like gradviz.watch) and check the training loop. gradviz's options "
                       "come before SCRIPT; everything after it is the script's.")
    p.add_argument("-o", "--output", metavar="RUN.gvrun", default=None,
                   help="run file to write (default: SCRIPT's name with .gvrun, in the current folder)")
    p.add_argument("--steps", type=integer(1), default=None, metavar="N",
                   help="stop after N optimizer steps (the script's own cleanup still runs)")
    p.add_argument("--every", type=integer(1), default=10, metavar="K",
                   help="node norms and the loop checks every K steps (default 10)")
    p.add_argument("script", help="the training script (a .py file)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's own arguments")
    p.set_defaults(command="run")
    return p


def run(args: argparse.Namespace) -> int:
    from gradviz.core.record.loading import summarize
    from gradviz.core.record.reader import open_ranks
    from gradviz.core.record.script_recorder import ScriptRecorder, StopRun
    from gradviz.core.runtime.gc_pause import started as gc_started
    from gradviz.core.runtime.interrupts import Stopped, script_starting

    script = os.path.abspath(args.script)
    if not script.endswith(".py"):
        say(f"gradviz run: {args.script} is not a Python script (.py)")
        return 2
    output = args.output or os.path.abspath(os.path.splitext(os.path.basename(script))[0] + ".gvrun")
    out = guard.out()
    recorder = ScriptRecorder(output, every=args.every, steps=args.steps)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args.script_args]
    sys.path.insert(0, os.path.dirname(script))
    error: BaseException | None = None
    stopped = False
    try:
        script_starting()
        gc_started()
        recorder.start()
        runpy.run_path(script, run_name="__main__")
    except StopRun:
        stopped = True
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = exc
    except (Stopped, KeyboardInterrupt) as exc:    # --timeout, Ctrl-C: the run keeps what it has, then the guard says
        recorder.finish(exc)
        raise
    except Exception as exc:  # noqa: BLE001 - the script's own exception: a finding, then one line
        error = exc
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    recorder.finish(error)
    info = summarize(open_ranks(recorder.watch.path))
    rank = info["ranks"][0]
    models = ", ".join(f"{m['model']} ({m['optimizer']}{'' if m['recorded'] else ', checked, not recorded'})"
                       for m in recorder.loop_models()) or "no model (no optimizer step)"
    print(f"gradviz run: {rank['steps']} step(s) of {models} recorded into {rank['path']}"
          + (f" (stopped after --steps {args.steps})" if stopped else ""), file=out)
    if info["findings"]:
        print("findings:", file=out)
        for f in info["findings"]:
            print(f"  [{f['severity']}] {f['code']}: {f['message']}", file=out)
    else:
        print("findings: none", file=out)
    out.flush()
    if error is None and not recorder.loop_models():
        # nothing was recorded, which is not a healthy run: say why and what would record it
        backwards = recorder.doctor.backwards_seen
        say("gradviz run: no torch.optim optimizer stepped, so no step was recorded"
            + (f" ({backwards} backward pass(es) ran: a loop that updates its parameters itself, e.g."
               " p.data.add_(...), is recorded with gradviz.watch(model) and w.step(loss) after each backward)"
               if backwards else " (no backward pass ran either)"))
        return 1
    if error is not None:
        where = recorder.doctor.findings()
        loc = next((f.location for f in where if f.code == "loop-exception" and f.location), None)
        say(f"gradviz run: the script raised {type(error).__name__}" + (f" at {loc}" if loc else "")
            + f": {error}")
        return 1
    return 0
