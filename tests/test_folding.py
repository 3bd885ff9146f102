"""Folding repeated blocks: which siblings fold, the fold box's numbers (torch as the oracle),
and opening one repeat, a range, or all of them."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.layout.folding import UNFOLD, find_repeats, parse_range, unfold_markers
from gradviz.core.layout.grouping import auto_depth, collapse, expanded_to_depth

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
sys.path.insert(0, str(SAMPLES))
import transformer as gpt  # noqa: E402


def trace_model(model, x, y, loss_fn):
    with gradviz.capture(model) as cap:
        loss = loss_fn(model(x), y)
    return gradviz.trace(loss, model, capture=cap)


@pytest.fixture(scope="module")
def gpt12():
    torch.manual_seed(0)
    model = gpt.make_gpt(12, 32)
    x, y = gpt.make_batch(0)
    graph = trace_model(model, x, y, gpt.loss_fn)
    model.zero_grad()
    gpt.loss_fn(model(x), y).backward()
    block_norms = [math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in b.parameters())) for b in model.blocks]
    return graph, block_norms


def folds_of(view):
    return {n: a for n, a in view.nodes(data=True) if a.get("fold")}


def test_gpt_blocks_fold_into_one_box_with_their_norms(gpt12):
    g, block_norms = gpt12
    assert find_repeats(g) == [{"parent": "blocks", "type": "Block", "members": [f"blocks.{i}" for i in range(12)]}]
    view = collapse(g, expanded=expanded_to_depth(g, 2))
    (fid, fold), = folds_of(view).items()
    assert fid == "fold:blocks.0..blocks.11" and fold["label"] == "Block × 12" and fold["kind"] == "group"
    assert fold["repeat_norms"] == pytest.approx(block_norms, rel=1e-9)        # torch: per-block parameter norms
    assert fold["grad_norm"] == pytest.approx(math.sqrt(sum(v * v for v in block_norms)), rel=1e-9)
    # every node drawn exactly once; the fold is fed by the embeddings and feeds the final norm
    inside = [m for a in view.nodes.values() if a.get("kind") == "group" for m in a["members"]]
    loose = [n for n, a in view.nodes(data=True) if a.get("kind") != "group"]
    assert sorted(inside + loose) == sorted(g.nodes) and len(inside) == len(set(inside))
    assert [view.nodes[p]["label"] for p in view.predecessors(fid)] == ["view"]   # the residual stream in
    assert nx.has_path(view, "param:tok_emb.weight", fid) and nx.has_path(view, fid, "loss")
    assert any(view.nodes[s].get("label") == "native_layer_norm" for s in view.successors(fid))
    assert view.graph["fold_of"]["blocks.7"] == fid


def test_the_200_block_gpt_opens_as_at_most_20_boxes():
    torch.manual_seed(0)
    model = gpt.make_gpt(200, 16)
    x, y = gpt.make_batch(0)
    g = trace_model(model, x, y, gpt.loss_fn)
    assert g.number_of_nodes() > 11_000
    view = collapse(g, expanded=expanded_to_depth(g, auto_depth(g, 200)))
    assert view.number_of_nodes() <= 20
    assert [a["label"] for a in folds_of(view).values()] == ["Block × 200"]


def test_open_one_repeat_splits_the_fold(gpt12):
    g, _ = gpt12
    base = expanded_to_depth(g, 2)
    view = collapse(g, expanded=base | {"blocks.5"})
    assert set(folds_of(view)) == {"fold:blocks.0..blocks.4", "fold:blocks.6..blocks.11"}
    assert "group:blocks.5.attn" in view and "group:blocks.5.mlp" in view
    assert view.has_edge("fold:blocks.0..blocks.4", "group:blocks.5.ln1") or any(
        view.has_edge("fold:blocks.0..blocks.4", s) for s in view if str(s).startswith(("group:blocks.5", "op:")))
    assert nx.has_path(view, "fold:blocks.0..blocks.4", "fold:blocks.6..blocks.11")


def test_unfold_a_range_or_all(gpt12):
    g, _ = gpt12
    base = expanded_to_depth(g, 2)
    fold = folds_of(collapse(g, expanded=base))["fold:blocks.0..blocks.11"]
    picked = unfold_markers(fold, parse_range("3-5", 12))
    assert picked == {UNFOLD + "blocks.2", UNFOLD + "blocks.3", UNFOLD + "blocks.4"}
    view = collapse(g, expanded=base | picked)
    assert set(folds_of(view)) == {"fold:blocks.0..blocks.1", "fold:blocks.5..blocks.11"}
    assert {"group:blocks.2", "group:blocks.3", "group:blocks.4"} <= set(view)
    everything = collapse(g, expanded=base | unfold_markers(fold, "all"))
    unfolded = collapse(g, expanded=base, fold=False)
    assert not folds_of(everything)
    assert list(everything.nodes) == list(unfolded.nodes) and set(everything.edges) == set(unfolded.edges)
    with pytest.raises(ValueError):
        parse_range("0-3", 12)
    with pytest.raises(ValueError):
        parse_range("12-13", 12)


class Heads(nn.Module):
    """Identical heads run side by side on one input: repeats, but not in sequence."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        return sum(h(x) for h in self.heads)


class Glued(nn.Module):
    """Identical layers joined by an op of the model itself: folding them would cut that op
    out of the sequence (a fold feeding itself), so they stay apart."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def test_only_identical_blocks_in_sequence_fold():
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    mse = nn.functional.mse_loss
    assert find_repeats(trace_model(Heads(), x, y, mse)) == []
    assert find_repeats(trace_model(Glued(), x, y, mse)) == []
    widths = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4))   # same class
    assert find_repeats(trace_model(widths, x, y, mse)) == [{"parent": "", "type": "Linear", "members": ["1", "2"]}]


def test_resnet_stage_folds_after_its_downsampling_block():
    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3, stride, 1)
            self.bn = nn.BatchNorm2d(cout)
            self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

        def forward(self, x):
            skip = x if self.down is None else self.down(x)
            return torch.relu(self.bn(self.conv(x)) + skip)

    stage = nn.Sequential(Basic(3, 8, 2), Basic(8, 8, 1), Basic(8, 8, 1), Basic(8, 8, 1))
    model = nn.Sequential(stage, nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(2, 3, 8, 8)
    model(x)
    g = trace_model(model, x, torch.tensor([0, 1]), nn.functional.cross_entropy)
    assert find_repeats(g) == [{"parent": "0", "type": "Basic", "members": ["0.1", "0.2", "0.3"]}]
    view = collapse(g, expanded={"0"})
    assert "group:0.0" in view and folds_of(view)["fold:0.1..0.3"]["label"] == "Basic × 3"


def test_meta_graphs_fold_without_values():
    g = gradviz.trace(SAMPLES / "transformer.py", meta=True)
    view = collapse(g, expanded=expanded_to_depth(g, 2))
    (fold,) = folds_of(view).values()
    assert fold["repeat_norms"] == [None] * len(fold["repeats"]) and fold["grad_norm"] is None
    assert fold["param_bytes"] == sum(g.graph["modules"][p]["param_bytes"] for p in fold["repeats"])
    assert fold["activation_bytes"] > 0


def test_a_container_of_one_run_opens_onto_its_fold(gpt12):
    """The ModuleList holding the blocks, closed at depth 1, is drawn as the blocks' fold (one box
    either way); a module with ops of its own besides a run stays closed."""
    g, _ = gpt12
    view = collapse(g, expanded=expanded_to_depth(g, 1))
    assert "blocks" in expanded_to_depth(g, 1) and "group:blocks" not in view
    assert [a["label"] for a in folds_of(view).values()] == ["Block × 12"]
    assert view.number_of_nodes() == collapse(g, expanded=set()).number_of_nodes()
    assert expanded_to_depth(g, 1) == {"blocks"}          # the embeddings and the head stay closed


def test_llama_layers_fold_in_the_first_views(monkeypatch):
    """transformers' Llama: model.layers (a ModuleList) shows as "LlamaDecoderLayer × N" at depth 2."""
    monkeypatch.setenv("GRADVIZ_LLAMA_LAYERS", "3")
    g = gradviz.trace(SAMPLES / "llama_70b.py", meta=True)
    for depth in (2, 3):
        view = collapse(g, expanded=expanded_to_depth(g, depth))
        assert [a["label"] for a in folds_of(view).values()] == ["LlamaDecoderLayer × 3"]
