"""Training overhead of gradviz's Trainer vs a plain PyTorch loop, UI responsiveness while
training, and time to 90 % accuracy on the digits MLP.

    python benchmarks/bench_training.py [--quick] [--no-ui] [--device cpu] [--toggles]

Overhead: in ONE process, INTERLEAVED blocks of ``--block`` steps (default 50) of a plain
loop (zero_grad, forward, backward, step; same batches) and of ``Trainer.step()`` with its
per-step statistics and node sampling at the default interval, on the digits MLP (batch
64) and a 12-block GPT (``make_gpt(12, 64)``). Median step times and their ratio; the
worst ratio is printed as the LAST line (goal <= 1.10).

UI: a QApplication with the training worker running the MLP flat out and the plots
redrawing from the history; a 10 ms QTimer records how late it fires (goal p99 <= 50 ms).

#18 before/after (2026-12-01, torch 2.13, --clock cpu, this script's interleaved() run on the tree
before the hot-path rewrite, 065a6b0, and on main, alternately; a 2-core machine at load 10-13:
one run's ratio moves by +-0.06): digits MLP 1.060 / 1.065 / 1.081 / 1.151 before, 1.050 / 1.120 /
1.143 / 1.175 after; GPT-12 1.114 / 1.238 / 1.194 / 1.151 before, 1.159 / 1.230 / 1.187 / 1.231
after. Python calls per MLP step (cProfile, deterministic): 416 before, 429 after (~3 us of a
750 us step). The toggles (--toggles, after the numpy path): see the commit that added them.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "samples"))

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))   # same thread count for both loops
CLOCK = time.perf_counter          # --clock cpu: this thread's CPU time (robust on a shared machine)

from gradviz.core.script.load import load_script  # noqa: E402
from gradviz.core.train.trainer import TrainConfig, Trainer  # noqa: E402

MLP = ROOT / "samples" / "mlp_digits.py"
GPT = ROOT / "samples" / "transformer.py"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def interleaved(script, make_model, device: str, blocks: int, block: int, warmup: int = 20,
                **options) -> tuple[float, float]:
    """Median step time (s) of the plain loop and of the Trainer (``options``: more TrainConfig
    fields), alternating blocks."""
    config = TrainConfig(device=device, seed=0, **options)
    trainer = Trainer(script, config)
    if make_model is not None:                      # e.g. a bigger GPT than the script's default
        torch.manual_seed(0)
        trainer.script.module.model = make_model   # noqa: the trainer re-creates from it
        trainer.reset()
    dev = trainer.device
    torch.manual_seed(0)
    model = (make_model() if make_model is not None else script.new_model()).to(dev)
    model.train()
    opt = script.make_optimizer(model.parameters())
    loss_fn = script.module.loss_fn

    plain_i = 0

    def plain_step() -> float:
        nonlocal plain_i
        t0 = CLOCK()
        inputs, targets = script.get_batch(plain_i)
        inputs = tuple(t.to(dev, non_blocking=True) for t in inputs)
        targets = targets.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(*inputs), targets)
        loss.backward()
        opt.step()
        _sync(dev)
        plain_i += 1
        return CLOCK() - t0

    def trainer_step() -> float:
        t0 = CLOCK()
        trainer.step()
        _sync(dev)
        return CLOCK() - t0

    for _ in range(warmup):
        plain_step()
        trainer_step()
    plain, ours = [], []
    for b in range(blocks):
        order = (plain_step, trainer_step) if b % 2 == 0 else (trainer_step, plain_step)
        for fn in order:
            times = [fn() for _ in range(block)]
            (plain if fn is plain_step else ours).extend(times)
    return statistics.median(plain), statistics.median(ours)


def time_to_accuracy(target: float = 0.90, every: int = 25, max_steps: int = 3000, device: str = "cpu"):
    script = load_script(MLP)
    trainer = Trainer(script, TrainConfig(device=device, seed=0))
    train_time = 0.0
    wall0 = time.perf_counter()
    while trainer.step_index < max_steps:
        t0 = time.perf_counter()
        trainer.run(every)
        train_time += time.perf_counter() - t0
        acc = trainer.evaluate().get("accuracy", 0.0)
        if acc >= target:
            return trainer.step_index, train_time, time.perf_counter() - wall0, acc
    return None, train_time, time.perf_counter() - wall0, acc


def ui_lateness(seconds: float = 5.0, device: str = "cpu") -> tuple[float, float, int, int]:
    """p50/p99 lateness (ms) of a 10 ms QTimer while the worker trains the MLP and plots redraw."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QElapsedTimer, QTimer
    from PySide6.QtWidgets import QApplication, QMainWindow

    from gradviz.app.training.history import History
    from gradviz.app.training.plots import TrainingPlots
    from gradviz.app.training.worker import TrainingWorker

    app = QApplication.instance() or QApplication([])
    win = QMainWindow()
    history = History()
    plots = TrainingPlots(history)
    win.setCentralWidget(plots)
    win.resize(1200, 800)
    win.show()
    worker = TrainingWorker(str(MLP), TrainConfig(device=device, seed=0))
    worker.rowsReady.connect(lambda rows: (history.extend(rows), plots.set_names(history.names)))
    lateness: list[float] = []
    times: list[float] = []
    clock = QElapsedTimer()
    timer = QTimer()
    timer.setInterval(10)
    last = [0.0]

    def tick():
        now = clock.nsecsElapsed() / 1e6
        if worker.step_index > 0:            # measure while training (not while the script loads)
            lateness.append(max(0.0, now - last[0] - 10.0))
            times.append(now)
        last[0] = now

    timer.timeout.connect(tick)
    worker.start_training()
    clock.start()
    timer.start()
    end = QTimer()
    end.setSingleShot(True)
    end.timeout.connect(app.quit)
    end.start(int(seconds * 1000))
    app.exec()
    timer.stop()
    steps = worker.step_index
    worker.stop()
    worker.wait(10000)
    plots.close()
    win.close()
    if os.environ.get("GRADVIZ_BENCH_DEBUG"):
        print("worst ticks (t ms, late ms):", sorted(zip(times, lateness), key=lambda p: -p[1])[:8])
    lateness = sorted(lateness[1:])
    p50 = lateness[len(lateness) // 2]
    p99 = lateness[min(len(lateness) - 1, int(0.99 * len(lateness)))]
    return p50, p99, steps, len(history)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer blocks")
    parser.add_argument("--no-ui", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--toggles", action="store_true",
                        help="also the MLP with adaptive clipping and label smoothing on (their cost)")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: time the overhead steps by this thread's CPU time (other processes sharing "
                             "the cores then add no noise; CPU device only)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}, {args.clock} clock")

    steps, train_s, wall_s, acc = time_to_accuracy(device=args.device)
    print(f"digits MLP time to 90% held-out accuracy: step {steps}, {train_s:.2f} s training "
          f"({wall_s:.2f} s with evaluations), accuracy {acc:.3f}")

    if not args.no_ui:
        p50, p99, n, hist = ui_lateness(3.0 if args.quick else 6.0, args.device)
        print(f"UI lateness of a 10 ms timer while training flat out: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
              f"({n} steps, {hist} history rows)")

    ratios = {}
    import transformer  # noqa: E402  (samples/)

    mlp = load_script(MLP)
    blocks = 6 if args.quick else 20
    p, o = interleaved(mlp, None, args.device, blocks, args.block)
    ratios["mlp"] = o / p
    print(f"digits MLP (batch 64): plain {p * 1e3:.3f} ms/step, gradviz {o * 1e3:.3f} ms/step, ratio {o / p:.3f}")
    if args.toggles:          # seed 002's toggles: their cost over a plain loop without them
        p, o = interleaved(mlp, None, args.device, blocks, args.block, adaptive_clip=0.02, label_smoothing=0.1)
        print(f"digits MLP with adaptive clipping 0.02 + label smoothing 0.1: plain {p * 1e3:.3f} ms/step, "
              f"gradviz {o * 1e3:.3f} ms/step, ratio {o / p:.3f} (not counted in the worst ratio)")

    gpt = load_script(GPT)
    p, o = interleaved(gpt, lambda: transformer.make_gpt(12, 64), args.device,
                       4 if args.quick else 8, max(10, args.block // 2 if args.quick else args.block))
    ratios["gpt12"] = o / p
    print(f"GPT 12 blocks d64: plain {p * 1e3:.3f} ms/step, gradviz {o * 1e3:.3f} ms/step, ratio {o / p:.3f}")
    worst = max(ratios, key=ratios.get)
    print(f"ratio (worst, {worst}): {ratios[worst]:.3f}")


if __name__ == "__main__":
    main()
