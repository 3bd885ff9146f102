"""What gradviz's Hugging Face callback costs a ``transformers.Trainer`` step, and what its raw-norm hooks add.

    python benchmarks/bench_hf_callback.py [--steps 60] [--repeats 3]

A tiny GPT-2 (random weights, CPU) trained with the Trainer, with gradient accumulation 1 and 4,
in three ways measured in the same run (interleaved, best of ``--repeats``): no callback (the
baseline), the callback with ``max_grad_norm=0`` (no clip: no hooks), and the callback with
``max_grad_norm=1`` (the Trainer clips: a post-accumulate-grad hook per parameter measures the raw
norms in the last micro-batch; the other micro-batches' hooks return at once). Prints seconds and
the ratios against the baseline.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 100, (32,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def train_seconds(callback: bool, max_grad_norm: float, accumulation: int, steps: int) -> float:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from gradviz.integrations.huggingface import GradvizCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=100, n_positions=32))
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, per_device_train_batch_size=4, max_steps=steps,
                                 gradient_accumulation_steps=accumulation, report_to=[], save_strategy="no",
                                 use_cpu=True, disable_tqdm=True, max_grad_norm=max_grad_norm, logging_steps=10**6)
        callbacks = [GradvizCallback(Path(tmp) / "run.gvrun", every=0)] if callback else []
        trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):      # the Trainer's own summary line
            trainer.train()
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args()
    logging.disable(logging.WARNING)
    ways = {"no callback": (False, 1.0), "callback, no clip": (True, 0.0), "callback, clip (hooks)": (True, 1.0)}
    for accumulation in (1, 4):
        best = {name: float("inf") for name in ways}
        for _ in range(opts.repeats):
            for name, (callback, clip) in ways.items():
                best[name] = min(best[name], train_seconds(callback, clip, accumulation, opts.steps))
        base = best["no callback"]
        print(f"gradient accumulation {accumulation}, {opts.steps} steps:")
        for name, seconds in best.items():
            print(f"  {name:24s} {seconds:6.2f} s   x{seconds / base:.3f}")


if __name__ == "__main__":
    main()
