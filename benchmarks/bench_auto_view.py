"""The automatic view (``core/layout/auto_view.py``) against the depth-based view it replaces
(``grouping.auto_depth`` at the old 220-item budget), measured in the same run.

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_auto_view.py [--rounds N]

Per model (transformers GPT-2 with 12 blocks, ResNet with ResNet-50's 3-4-6-3 stages, and the
sample 200-block GPT, 11,000+ nodes): the time to choose the view and collapse the graph, and
with the layout of the result (what the window, the export and a notebook all do before
drawing), old and new, with the box counts. Best of N rounds, old and new alternating; ratios are what to quote (the
machine is shared).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "samples"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def best_pair(old, new, rounds: int) -> tuple[float, float]:
    """Best times of ``old`` and ``new``, run alternately (a shared machine's load drifts)."""
    old(), new()
    a, b = [], []
    for _ in range(rounds):
        for fn, times in ((old, a), (new, b)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return min(a), min(b)


def gpt2():
    import transformers
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=12,
                                                             n_head=2))
    x = torch.randint(96, (2, 12))
    return m, lambda: m(x, labels=x).loss


def resnet():
    import transformers
    m = transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[3, 4, 6, 3], num_labels=3, layer_type="bottleneck"))
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 1])
    return m, lambda: m(x, labels=y).loss


def gpt200():
    import transformer as gpt
    m = gpt.make_gpt(200, 16)
    x, y = gpt.make_batch(0)
    return m, lambda: gpt.loss_fn(m(x), y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import gradviz
    from gradviz.core.layout.auto_view import auto_expanded
    from gradviz.core.layout.grouping import auto_depth, collapse, expanded_to_depth
    from gradviz.render.primitives.qtcompat import ensure_app
    from gradviz.render.primitives.style import layout_graph

    ensure_app()

    def old_view(g):
        return collapse(g, expanded=expanded_to_depth(g, auto_depth(g, 220)))

    def new_view(g):
        return collapse(g, expanded=auto_expanded(g))

    print(f"{'model':<22}{'nodes':>7}{'old boxes':>10}{'new boxes':>10}{'old choose':>11}{'new choose':>11}"
          f"{'ratio':>7}{'old +layout':>12}{'new +layout':>12}{'ratio':>7}")
    for name, build in (("GPT-2 (12 blocks)", gpt2), ("ResNet (3-4-6-3)", resnet), ("GPT 200 blocks", gpt200)):
        torch.manual_seed(0)
        model, loss_of = build()
        with gradviz.capture(model) as cap:
            loss = loss_of()
        g = gradviz.trace(loss, model, capture=cap)
        t_old, t_new = best_pair(lambda: old_view(g), lambda: new_view(g), args.rounds)
        l_old, l_new = best_pair(lambda: layout_graph(old_view(g)), lambda: layout_graph(new_view(g)), args.rounds)
        print(f"{name:<22}{g.number_of_nodes():>7}{old_view(g).number_of_nodes():>10}{new_view(g).number_of_nodes():>10}"
              f"{t_old * 1e3:>9.1f}ms{t_new * 1e3:>9.1f}ms{t_new / t_old:>7.2f}"
              f"{l_old * 1e3:>10.1f}ms{l_new * 1e3:>10.1f}ms{l_new / l_old:>7.2f}")


if __name__ == "__main__":
    main()
