"""Placing ops in modules without capture (``core/trace/module_guess.py``): forward order from autograd
sequence numbers against the nearest-parameter-op guess it replaces (still its fallback), same run.

    python benchmarks/bench_module_guess.py [--rounds N]

``gradviz.trace(loss, model=model)`` on the sample 200-block GPT (11,000+ nodes) and transformers'
GPT-2 with 12 blocks, old and new alternating, best of N: the whole trace's time, and the runs each
finds (``find_repeats``). The old guess is reached by giving it no sequence numbers. Ratios are what
to quote (the machine is shared).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "samples"))

import gradviz  # noqa: E402
from gradviz.core.layout.folding import find_repeats  # noqa: E402
from gradviz.core.trace import graph_build  # noqa: E402


def models():
    import transformer as gpt
    torch.manual_seed(0)
    big = gpt.make_gpt(200, 32)
    x, y = gpt.make_batch(0)
    yield "GPT sample, 200 blocks", big, lambda m: gpt.loss_fn(m(x), y)
    try:
        import transformers
    except ImportError:
        return
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=16, n_layer=12,
                                                             n_head=2))
    ids = torch.randint(96, (2, 12))
    yield "transformers GPT-2, 12 blocks", m, lambda m: m(ids, labels=ids).loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    numbers = graph_build._sequence_numbers

    def trace(model, loss_of, ordered: bool):
        graph_build._sequence_numbers = numbers if ordered else (lambda node_ids: {})
        try:
            loss = loss_of(model)
            t = time.perf_counter()
            g = gradviz.trace(loss, model=model)
            return time.perf_counter() - t, g
        finally:
            graph_build._sequence_numbers = numbers

    for name, model, loss_of in models():
        best = {False: float("inf"), True: float("inf")}
        graphs = {}
        for _ in range(rounds):
            for ordered in (False, True):
                dt, graphs[ordered] = trace(model, loss_of, ordered)
                best[ordered] = min(best[ordered], dt)
        runs = {k: [f"{r['type']} x {len(r['members'])}" for r in find_repeats(g)] for k, g in graphs.items()}
        print(f"{name}: {graphs[True].number_of_nodes()} nodes; trace old {best[False] * 1e3:.0f} ms, "
              f"new {best[True] * 1e3:.0f} ms, ratio {best[True] / best[False]:.2f}; runs old {runs[False]}, "
              f"new {runs[True]}")


if __name__ == "__main__":
    main()
