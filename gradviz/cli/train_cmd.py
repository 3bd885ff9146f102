"""``gradviz train SCRIPT --steps N``: train headless, print progress and a summary.

Exit status: 0 done, 1 the loss became non-finite, 2 the script is broken
(``file:line: message`` on stderr).
"""
from __future__ import annotations

import argparse
import json
import math
import time

from gradviz.cli import guard
from gradviz.cli.arg_types import MAX_SEED, integer, real
from gradviz.cli.options import UsageError
from gradviz.core.runtime.interrupts import Interrupted
from gradviz.cli.say import say


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("train", help="train a model script headless, printing loss and gradient norms",
                       description="Train SCRIPT for N steps with gradviz's trainer (per-step gradient "
                       "statistics) and print progress and a final summary.")
    p.add_argument("script", help="model script (defines model, batch, loss_fn)")
    p.add_argument("--steps", type=integer(1), default=100, help="optimizer steps (default 100)")
    p.add_argument("--json", action="store_true", help="JSON lines: one object per progress line, then a summary")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    p.add_argument("--lr", type=real(0.0), default=None, help="learning rate (default: the optimizer's)")
    p.add_argument("--optimizer", default=None, choices=["sgd", "sgd-momentum", "adam", "adamw"],
                   help="override the script's optimizer")
    p.add_argument("--schedule", default="constant", choices=["constant", "step", "cosine"])
    p.add_argument("--clip", type=real(0.0), default=None, metavar="MAX_NORM", help="clip the global grad norm")
    p.add_argument("--agc", type=real(0.0), default=None, metavar="LAMBDA",
                   help="per-layer adaptive gradient clipping: each gradient clipped to LAMBDA * max(||W||, eps) "
                   "(before --clip; e.g. 0.01-0.1)")
    p.add_argument("--agc-eps", type=real(0.0, above=False), default=1e-3, metavar="EPS",
                   help="adaptive clipping's floor of ||W|| (default 1e-3)")
    p.add_argument("--agc-granularity", default="parameter", choices=["parameter", "unit"],
                   help="adaptive clipping per parameter tensor (default) or per output unit (NFNets)")
    p.add_argument("--label-smoothing", type=real(0.0, 1.0, above=False), default=0.0, metavar="EPS",
                   help="label smoothing of the script's cross-entropy loss (0-1; default 0: off)")
    p.add_argument("--accum", type=integer(1, 1_000_000), default=1, metavar="K", help="accumulate K micro-batches per step")
    p.add_argument("--no-zero-grad", action="store_true", help="do not zero gradients between steps")
    p.add_argument("--amp", action="store_true", help="mixed precision (CUDA only)")
    p.add_argument("--seed", type=integer(0, MAX_SEED), default=0)
    p.add_argument("--every", type=integer(1), default=10, metavar="M", help="print progress every M steps (default 10)")
    p.set_defaults(command="train")
    return p


def _num(x: float) -> float | None:
    return x if isinstance(x, float) and math.isfinite(x) else (None if isinstance(x, float) else x)


def _clipped_params(row) -> int:
    """How many parameters' gradients clipping shrank at this step (beyond rounding)."""
    import numpy as np

    pre, post = row.param_norms, row.param_norms_clipped
    with np.errstate(invalid="ignore"):
        return int(np.count_nonzero(post < pre * (1 - 1e-6)))


def _progress(row, rate: float, as_json: bool, out, clipping: bool) -> None:
    s = row.step + 1
    if as_json:
        print(json.dumps({"step": s, "loss": _num(row.loss), "grad_norm": _num(row.grad_norm),
                          "grad_norm_clipped": _num(row.grad_norm_clipped), "clipped_params": _clipped_params(row),
                          "lr": _num(row.lr), "steps_per_s": rate}), file=out, flush=True)
    else:
        clipped = (f"  clipped {row.grad_norm_clipped:.4g} ({_clipped_params(row)}/{len(row.param_norms)} params)"
                   if clipping else "")
        print(f"step {s:6d}  loss {row.loss:.5g}  grad norm {row.grad_norm:.4g}{clipped}  "
              f"lr {row.lr:.3g}  {rate:.1f} steps/s", file=out, flush=True)


def run(args: argparse.Namespace) -> int:
    # over 60 lines: setup, loop and summary of one command in reading order; the summary dict is the --json
    # contract, kept beside the loop that fills it
    import torch

    from gradviz.core.runtime.devices import training_threads
    from gradviz.core.script.load import load_script  # a ScriptError goes to the CLI's guard: message + JSON
    from gradviz.core.train.trainer import NonFiniteLossError, TrainConfig, Trainer

    out = guard.out()   # the real stdout: the script's own prints go to stderr
    try:
        script = load_script(args.script)
        config = TrainConfig(device=args.device, optimizer=args.optimizer, lr=args.lr, schedule=args.schedule,
                             total_steps=max(1, args.steps), max_grad_norm=args.clip, accumulation=args.accum,
                             zero_grad_every_step=not args.no_zero_grad, amp=args.amp, seed=args.seed,
                             node_sample_interval_s=None, adaptive_clip=args.agc, adaptive_clip_eps=args.agc_eps,
                             adaptive_clip_granularity=args.agc_granularity, label_smoothing=args.label_smoothing)
        trainer = Trainer(script, config)
        if trainer.device.type == "cpu":
            torch.set_num_threads(training_threads())      # the window's policy: one core left free
    except ValueError as exc:   # a configuration the trainer refuses: the guard prints it (and JSON)
        raise UsageError(str(exc)) from None

    every = max(1, args.every)
    clipping = args.clip is not None or args.agc is not None
    start = time.perf_counter()
    mark_t, mark_step = start, 0
    last = None
    status, error = 0, None
    try:
        for _ in range(max(0, args.steps)):
            row = trainer.step()
            last = row
            s = row.step + 1
            if s % every == 0 or s == args.steps:
                now = time.perf_counter()
                _progress(row, (s - mark_step) / max(now - mark_t, 1e-9), args.json, out, clipping)
                mark_t, mark_step = now, s
    except NonFiniteLossError as exc:
        status, error = 1, exc
    except Interrupted as exc:    # Ctrl-C (the guard's): a summary of the steps done, then exit 130
        status, error = 130, exc
    elapsed = time.perf_counter() - start
    metrics: dict[str, float] = {}
    if status == 0:
        metrics = trainer.evaluate()
    summary = {"summary": True, "script": str(script.path), "steps": trainer.step_index,
               "device": str(trainer.device), "final_loss": _num(last.loss) if last else None,
               "grad_norm": _num(last.grad_norm) if last else None, "metrics": metrics,
               "seconds": elapsed, "threads": torch.get_num_threads(), "max_grad_norm": args.clip,
               "adaptive_clip": None if args.agc is None else {"factor": args.agc, "eps": args.agc_eps,
                                                                "granularity": args.agc_granularity},
               "label_smoothing": args.label_smoothing,
               "status": "ok" if status == 0 else "nonfinite-loss" if status == 1 else "interrupted"}
    if error is not None:
        summary["error"] = str(error)
    if args.json:
        print(json.dumps(summary), file=out, flush=True)
    else:
        print(f"done: {trainer.step_index} steps in {elapsed:.2f} s on {trainer.device}", file=out)
        if last:
            print(f"final loss {last.loss:.5g}, global grad norm {last.grad_norm:.4g}", file=out)
        for name, value in metrics.items():
            shown = f"{100 * value:.1f} %" if name in ("accuracy", "acc") and 0 <= value <= 1 else f"{value:.5g}"
            print(f"{name}: {shown}", file=out)
    if error is not None:
        say(str(error))
    return status
