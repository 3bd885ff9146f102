"""What a notebook stores for one picture: gradviz's output bundle against torchviz's ``make_dot``.

    python benchmarks/bench_notebook_size.py            # MLP, 2-layer GPT-2, ResNet (transformers, tiny)

For each model the loss is traced from a tensor (``gradviz.show(loss, model=model)``, as a notebook does)
and the bundle IPython's display formatter makes of the result is measured in bytes, every MIME type
it holds together (that is what the .ipynb stores): gradviz with the notebook default (``collapse="auto"``,
at most 60 boxes, repeated blocks folded), gradviz fully expanded, and torchviz's ``make_dot(loss,
params)`` (its ``_repr_mimebundle_`` runs Graphviz ``dot``), when torchviz is importable (it may sit in a
folder given by ``--torchviz-path``). Prints the ratio gradviz / torchviz: at most 1 is the goal. Without
torchviz it prints the bytes torchviz 0.0.3 stored for these models when measured here (``RECORDED``).
``ipynb`` columns: the same outputs as a saved notebook holds them (nbformat's JSON: quotes and newlines
escaped, one string per line), one cell each, the empty notebook's bytes subtracted.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402
from torch import nn  # noqa: E402


def mlp():
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    return model, nn.functional.cross_entropy(model(x), y)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=32))
    ids = torch.randint(0, 100, (2, 16))
    return model, model(ids, labels=ids).loss


def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification

    model = ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64],
                                                      depths=[2, 2, 2, 2], num_labels=10))
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 10, (2,))
    return model, model(x, labels=y).loss


# torchviz 0.0.3 make_dot bundles (bytes, ipynb bytes), measured 2026-12-02 with this script (torch 2.13 CPU,
# graphviz 2.43's dot): quoted when torchviz is not importable
RECORDED = {"MLP": (15_500, 20_069), "GPT-2": (131_177, 166_894), "ResNet": (198_187, 249_680)}


def bundle_bytes(obj) -> tuple[int, int, list[str]]:
    """(bytes of every MIME type, bytes in a saved .ipynb, the MIME types)."""
    import nbformat
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(obj)
    cell = nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("execute_result", data=data,
                                                                           execution_count=1)])
    empty = len(nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])).encode())
    stored = len(nbformat.writes(nbformat.v4.new_notebook(cells=[cell])).encode()) - empty
    return sum(len(str(v).encode()) for v in data.values()), stored, sorted(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchviz-path", default=None, help="a folder holding torchviz (pip install --target)")
    args = parser.parse_args()
    if args.torchviz_path:
        sys.path.append(args.torchviz_path)
    import gradviz

    try:
        from torchviz import make_dot
    except ImportError:
        make_dot = None
    source = "measured now" if make_dot else "torchviz not importable: its bytes as RECORDED on 2026-12-02"
    print(f"torchviz: {source}")
    print(f"{'model':8} {'nodes':>6} {'gradviz auto':>13} {'(ipynb)':>9} {'gradviz full':>13} {'torchviz':>9} "
          f"{'(ipynb)':>9} {'auto/torchviz':>14}")
    for name, build in (("MLP", mlp), ("GPT-2", gpt2), ("ResNet", resnet)):
        torch.manual_seed(0)
        model, loss = build()
        picture = gradviz.show(loss, model=model)
        auto, auto_nb, kinds = bundle_bytes(picture)
        full = bundle_bytes(gradviz.show(picture.graph, collapse=None))[0]
        if make_dot:
            theirs, theirs_nb, _ = bundle_bytes(make_dot(loss, params=dict(model.named_parameters())))
        else:
            theirs, theirs_nb = RECORDED[name]
        text = lambda v: "-" if v is None else f"{v:,}"     # noqa: E731
        print(f"{name:8} {picture.graph.number_of_nodes():6} {auto:13,} {auto_nb:9,} {full:13,} {text(theirs):>9} "
              f"{text(theirs_nb):>9} {auto / theirs:14.2f}   ({', '.join(kinds)})")


if __name__ == "__main__":
    main()
