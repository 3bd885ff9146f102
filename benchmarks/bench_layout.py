"""Benchmark the layered layout engine against Graphviz ``dot`` on GPT-shaped graphs.

    python benchmarks/bench_layout.py            # 12, 48, 100, 200 and ~860 blocks
    python benchmarks/bench_layout.py --no-huge  # skip the ~50k-node graph
    python benchmarks/bench_layout.py --dot-max 200   # also time dot on bigger graphs (slow)

``synthetic_gpt_graph`` lives here (not in the package) and is shared with the tests.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx

if __package__ in (None, ""):  # run as a script: make ``gradviz`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Builder:
    """Adds autograd-like nodes with ``kind``/``label``/``module`` attributes."""

    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.n = 0

    def node(self, label: str, module: str, kind: str = "op", inputs: tuple = ()) -> int:
        nid = self.n
        self.n += 1
        self.g.add_node(nid, label=label, module=module, kind=kind)
        for src in inputs:
            self.g.add_edge(src, nid)
        return nid

    def param(self, name: str, module: str) -> int:
        return self.node(name, module, kind="param")

    def linear(self, x: int, module: str) -> int:
        """weight -> TBackward, bias; AddmmBackward(bias, x, W^T) -> ViewBackward (5 nodes)."""
        w = self.param(f"{module}.weight", module)
        wt = self.node("TBackward0", module, inputs=(w,))
        b = self.param(f"{module}.bias", module)
        mm = self.node("AddmmBackward0", module, inputs=(b, x, wt))
        return self.node("ViewBackward0", module, inputs=(mm,))

    def layernorm(self, x: int, module: str) -> int:
        w = self.param(f"{module}.weight", module)
        b = self.param(f"{module}.bias", module)
        return self.node("NativeLayerNormBackward0", module, inputs=(x, w, b))


def synthetic_gpt_graph(n_blocks: int) -> nx.DiGraph:
    """A DAG shaped like a GPT autograd graph: ~58 nodes per block, data flows to the loss.

    Each block: ln1 -> q/k/v projections (weight -> TBackward, bias -> AddmmBackward) ->
    head views/transposes -> bmm -> softmax -> dropout -> bmm -> out projection -> dropout
    -> residual add (an edge skipping the whole attention path), then ln2 -> fc1 -> gelu
    -> fc2 -> dropout -> residual add.  58 nodes per block; 200 blocks is 11,617 nodes.
    """
    b = _Builder()
    idx = b.node("idx", "", kind="input")
    wte = b.param("wte.weight", "wte")
    wpe = b.param("wpe.weight", "wpe")
    tok = b.node("EmbeddingBackward0", "wte", inputs=(idx, wte))
    pos = b.node("EmbeddingBackward0", "wpe", inputs=(wpe,))
    h = b.node("AddBackward0", "", inputs=(tok, pos))
    h = b.node("NativeDropoutBackward0", "drop", inputs=(h,))
    for i in range(n_blocks):
        blk = f"blocks.{i}"
        attn = f"{blk}.attn"
        x = b.layernorm(h, f"{blk}.ln1")
        x2d = b.node("ViewBackward0", attn, inputs=(x,))
        heads = []
        for name in ("q_proj", "k_proj", "v_proj"):
            y = b.linear(x2d, f"{attn}.{name}")
            y = b.node("ViewBackward0", f"{attn}.{name}", inputs=(y,))
            heads.append(b.node("TransposeBackward0", f"{attn}.{name}", inputs=(y,)))
        q, k, v = heads
        kt = b.node("TransposeBackward0", attn, inputs=(k,))
        s = b.node("BmmBackward0", attn, inputs=(q, kt))
        s = b.node("DivBackward0", attn, inputs=(s,))
        s = b.node("SoftmaxBackward0", attn, inputs=(s,))
        s = b.node("NativeDropoutBackward0", f"{attn}.attn_drop", inputs=(s,))
        o = b.node("BmmBackward0", attn, inputs=(s, v))
        o = b.node("TransposeBackward0", attn, inputs=(o,))
        o = b.node("CloneBackward0", attn, inputs=(o,))
        o = b.node("ViewBackward0", attn, inputs=(o,))
        o = b.linear(o, f"{attn}.out_proj")
        o = b.node("NativeDropoutBackward0", f"{attn}.resid_drop", inputs=(o,))
        h = b.node("AddBackward0", blk, inputs=(h, o))
        mlp = f"{blk}.mlp"
        x = b.layernorm(h, f"{blk}.ln2")
        x = b.node("ViewBackward0", mlp, inputs=(x,))
        x = b.linear(x, f"{mlp}.fc1")
        x = b.node("GeluBackward0", mlp, inputs=(x,))
        x = b.linear(x, f"{mlp}.fc2")
        x = b.node("NativeDropoutBackward0", f"{mlp}.drop", inputs=(x,))
        h = b.node("AddBackward0", blk, inputs=(h, x))
    h = b.layernorm(h, "ln_f")
    w = b.param("lm_head.weight", "lm_head")
    wt = b.node("TBackward0", "lm_head", inputs=(w,))
    h = b.node("ViewBackward0", "lm_head", inputs=(h,))
    logits = b.node("MmBackward0", "lm_head", inputs=(h, wt))
    lsm = b.node("LogSoftmaxBackward0", "", inputs=(logits,))
    tgt = b.node("targets", "", kind="input")
    b.node("NllLossBackward0", "", kind="loss", inputs=(lsm, tgt))
    return b.g


def to_dot(graph: nx.DiGraph) -> str:
    """The graph as dot source with the same box sizes gradviz estimates."""
    from gradviz.core.layout.types import node_size

    lines = ["digraph G {", "  node [shape=box, fixedsize=true];"]
    index = {node: i for i, node in enumerate(graph.nodes)}
    for node, i in index.items():
        w, h = node_size(node, graph.nodes[node])
        lines.append(f'  n{i} [width={w / 72:.3f}, height={h / 72:.3f}, label=""];')
    lines.extend(f"  n{index[u]} -> n{index[v]};" for u, v in graph.edges)
    lines.append("}")
    return "\n".join(lines)


def time_dot(graph: nx.DiGraph, timeout: float) -> float | None:
    """Seconds for ``dot -Tplain`` on ``graph``; None on timeout."""
    with tempfile.NamedTemporaryFile("w", suffix=".dot", delete=False) as f:
        f.write(to_dot(graph))
        path = f.name
    try:
        t0 = time.perf_counter()
        subprocess.run(["dot", "-Tplain", path], check=True, capture_output=True, timeout=timeout)
        return time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return None
    finally:
        Path(path).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    from gradviz.core.layout.layered import layout
    from gradviz.core.layout.types import LayoutOptions

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, nargs="*", default=[12, 48, 100, 200, 860])
    ap.add_argument("--no-huge", action="store_true", help="skip graphs over 20k nodes")
    ap.add_argument("--dot-max", type=int, default=100, help="largest block count to time dot on")
    ap.add_argument("--dot-timeout", type=float, default=15.0)
    args = ap.parse_args(argv)

    has_dot = shutil.which("dot") is not None
    start = time.perf_counter()
    print(f"{'blocks':>6} {'nodes':>7} {'edges':>7} {'dummies':>8} {'layers':>7} "
          f"{'gradviz s':>10} {'dot s':>8} {'ratio':>7}")
    for n_blocks in args.blocks:
        graph = synthetic_gpt_graph(n_blocks)
        if args.no_huge and graph.number_of_nodes() > 20_000:
            continue
        t0 = time.perf_counter()
        result = layout(graph, LayoutOptions())
        ours = time.perf_counter() - t0
        dot_s = None
        if has_dot and n_blocks <= args.dot_max:
            dot_s = time_dot(graph, args.dot_timeout)
        dot_txt = "-" if dot_s is None else f"{dot_s:.2f}"
        ratio = "-" if dot_s is None else f"{ours / dot_s:.3f}"
        n_layers = max(result.layer.values(), default=-1) + 1
        print(f"{n_blocks:>6} {graph.number_of_nodes():>7} {graph.number_of_edges():>7} "
              f"{result.n_dummies:>8} {n_layers:>7} {ours:>10.3f} {dot_txt:>8} {ratio:>7}",
              flush=True)
    print(f"total benchmark time {time.perf_counter() - start:.1f} s"
          + ("" if has_dot else " (dot not installed: no comparison)"))


if __name__ == "__main__":
    main()
