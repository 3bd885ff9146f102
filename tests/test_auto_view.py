"""The automatic view (``core/layout/auto_view.py``) on real library models: transformers' GPT-2,
BERT, T5, Llama, ViT, ResNet, ConvNeXt, Whisper from tiny configs (random weights, no
downloads) and torch's ``nn.Transformer``: GPT-2 with its real 12 blocks, ResNet and ConvNeXt
with ResNet-50's and ConvNeXt-T's stages, the others with 3-4 layers (CI time). Each opens
within the box budget with its repeated blocks folded; the view is the same for the export,
the window and notebooks; boxes say what is inside (torch as the oracle for the numbers).

Issue #30 measured the old depth-based view at 91 boxes for GPT-2 (twelve blocks spelled out)
and 192 for ResNet (no fold). Peers' users ask for the same folding: torchview #118 / #109,
torchvista #31 (fold repeated blocks), torchview #102 / torchviz #22 (parameter counts per box).
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.layout.auto_view import AUTO_BOXES, auto_expanded, expanded_for
from gradviz.core.layout.box_facts import count_text
from gradviz.core.layout.grouping import collapse, expanded_to_depth, visible_count
from gradviz.core.runtime.formatting import byte_size, number

import transformers  # noqa: E402  (a test dependency: never skipped, tests/test_honest_skips.py)


def ids(vocab=96, shape=(2, 12)):
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(0))


def gpt2():
    m = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=96, n_positions=32, n_embd=16, n_layer=12,
                                                             n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
                                                             attn_pdrop=0.0))   # no dropout: the norms re-run
    x = ids()
    return m, lambda m: m(x, labels=x).loss


def resnet():   # ResNet-50's stages (3, 4, 6, 3 bottlenecks), 8-16 channels
    m = transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[3, 4, 6, 3], num_labels=3, layer_type="bottleneck"))
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def bert():
    m = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=96, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, num_labels=3,
        max_position_embeddings=32))
    x, y = ids(), torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def t5():
    m = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=96, d_model=16, d_kv=8, d_ff=32, num_layers=3, num_decoder_layers=3, num_heads=2,
        decoder_start_token_id=0))
    x = ids()
    return m, lambda m: m(x, labels=x).loss


def llama():
    m = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=96, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=32))
    x = ids()
    return m, lambda m: m(x, labels=x).loss


def vit():
    m = transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
        num_labels=3))
    x, y = torch.randn(2, 3, 16, 16), torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def convnext():  # ConvNeXt-T's stages (3, 3, 9, 3)
    m = transformers.ConvNextForImageClassification(transformers.ConvNextConfig(
        num_channels=3, num_stages=4, hidden_sizes=[8, 16, 16, 16], depths=[3, 3, 9, 3], num_labels=3))
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def whisper():
    m = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=96, num_mel_bins=8, d_model=16, encoder_layers=3, decoder_layers=3, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=8,
        max_target_positions=16, decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    x, y = torch.randn(2, 8, 16), torch.randint(3, 96, (2, 6), generator=torch.Generator().manual_seed(0))
    return m, lambda m: m(input_features=x, labels=y).loss


def nn_transformer():
    m = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=3, num_decoder_layers=3, dim_feedforward=32,
                       batch_first=True)
    s, t = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    return m, lambda m: m(s, t).pow(2).mean()


# model -> the folds its automatic view must show. Where a stack's first block is not in its
# fold, torch's graph says why: ResNet's first bottleneck of a stage downsamples (a projection
# shortcut), T5's first block owns the relative attention bias, and nn.Transformer's first
# layer reads the (grad-free) input, so its autograd graph lacks the transpose/clone ops the
# others have on their input.
EXPECTED = {
    "gpt2": (gpt2, ["GPT2Block × 12"]),
    "resnet": (resnet, ["ResNetBottleNeckLayer × 3", "ResNetBottleNeckLayer × 5"]),
    "bert": (bert, ["BertLayer × 3"]),
    "t5": (t5, ["T5Block × 2", "T5Block × 2"]),
    "llama": (llama, ["LlamaDecoderLayer × 4"]),
    "vit": (vit, ["ViTLayer × 3"]),
    "convnext": (convnext, ["ConvNextLayer × 9", "ConvNextLayer × 3"]),
    "whisper": (whisper, ["WhisperDecoderLayer × 3", "WhisperEncoderLayer × 3"]),
    "nn.Transformer": (nn_transformer, ["TransformerDecoderLayer × 2", "TransformerEncoderLayer × 2"]),
}
_TRACED: dict[str, tuple] = {}


def traced(name: str):
    """(model, graph) of one model, traced once per test session."""
    if name not in _TRACED:
        torch.manual_seed(0)
        model, loss_of = EXPECTED[name][0]()
        with gradviz.capture(model) as cap:
            loss = loss_of(model)
        _TRACED[name] = model, gradviz.trace(loss, model, capture=cap), loss_of
    return _TRACED[name]


def folds(view) -> list[str]:
    return sorted(a["label"] for a in view.nodes.values() if a.get("fold"))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_model_opens_folded_within_the_budget(name):
    _, g, _ = traced(name)
    expanded = auto_expanded(g)
    view = collapse(g, expanded=expanded)
    assert view.number_of_nodes() == visible_count(g, expanded) <= AUTO_BOXES
    for label in EXPECTED[name][1]:
        assert label in folds(view), (label, folds(view))
    # every node drawn once, whatever the grouping
    inside = [m for a in view.nodes.values() if a.get("kind") == "group" for m in a["members"]]
    loose = [n for n, a in view.nodes(data=True) if a.get("kind") != "group"]
    assert sorted(map(str, inside + loose)) == sorted(map(str, g.nodes))
    # grown as far as the budget allows: opening any closed box with submodules overflows it
    modules = g.graph["modules"]
    for a in view.nodes.values():
        if a.get("kind") == "group" and not a.get("fold") and any(
                info.get("parent") == a["module"] and info.get("nodes") for info in modules.values()):
            assert visible_count(g, expanded | {a["module"]}) > AUTO_BOXES, a["module"]


def test_the_old_depth_view_spelled_the_blocks_out():
    """The regression the issue measured: a depth that opens the blocks' insides shows all twelve."""
    _, g, _ = traced("gpt2")
    assert folds(collapse(g, expanded=expanded_to_depth(g, 4))) == []
    assert folds(collapse(g, expanded=auto_expanded(g))) == ["GPT2Block × 12"]


def test_resnet_stages_fold_beside_their_downsampling_layer():
    _, g, _ = traced("resnet")
    view = collapse(g, expanded=auto_expanded(g))
    fold = next(a for a in view.nodes.values() if a.get("label") == "ResNetBottleNeckLayer × 5")
    stage = "resnet.encoder.stages.2.layers"
    assert fold["repeats"] == [f"{stage}.{i}" for i in range(1, 6)]
    first = [a for a in view.nodes.values() if str(a.get("module", "")).startswith(f"{stage}.0")]
    assert first and not any(a.get("fold") for a in first)     # the first layer: its own box(es)


def test_user_expansions_are_kept():
    _, g, _ = traced("gpt2")
    keep = {"transformer", "transformer.h", "transformer.h.3"}
    expanded = auto_expanded(g, keep=keep)
    assert keep <= expanded
    view = collapse(g, expanded=expanded)
    assert folds(view) == ["GPT2Block × 3", "GPT2Block × 8"]       # the fold splits around the open block
    assert "group:transformer.h.3" not in view and "transformer.h.3" not in view.graph["fold_of"]
    assert any(str(a.get("module", "")).startswith("transformer.h.3.") for a in view.nodes.values())


def test_a_budget_below_the_overview_gives_the_overview():
    _, g, _ = traced("t5")
    assert auto_expanded(g, max_boxes=1) == expanded_to_depth(g, 1)


def test_export_window_and_notebook_open_the_same_view():
    from gradviz import notebook
    from gradviz.app.first_view import choose_grouping

    _, g, _ = traced("llama")
    window, _, _ = choose_grouping(g, None, AUTO_BOXES, lambda view: None)
    assert notebook.NOTEBOOK_BOXES == AUTO_BOXES
    assert window == expanded_for(g, "auto") == notebook._expanded(g, "auto") == auto_expanded(g)
    assert expanded_for(g, 2) == expanded_to_depth(g, 2)
    with pytest.raises(ValueError):
        expanded_for(g, "deep")


def test_boxes_say_parameter_count_and_gradient_norm():
    """The fold of GPT-2's blocks: its parameter count and its parameters' gradient norm, from torch."""
    model, g, loss_of = traced("gpt2")
    model.zero_grad()
    loss_of(model).backward()
    blocks = list(model.transformer.h)
    numel = sum(p.numel() for b in blocks for p in b.parameters())
    norm = math.sqrt(sum(float(p.grad.double().norm()) ** 2 for b in blocks for p in b.parameters()))
    view = collapse(g, expanded=auto_expanded(g))
    (fold,) = (a for a in view.nodes.values() if a.get("fold"))
    assert fold["numel"] == numel and fold["param_grad_norm"] == pytest.approx(norm, rel=1e-6)
    assert fold["facts"] == f"{count_text(numel)} params · grad {number(fold['param_grad_norm'], compact=True)}"
    body = collapse(g, depth=1).nodes["group:transformer"]     # (lm_head's weight is tied to wte's: counted there)
    params = list(model.transformer.parameters())
    body_norm = math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in params))
    assert body["numel"] == sum(p.numel() for p in params)
    assert body["param_grad_norm"] == pytest.approx(body_norm, rel=1e-6)
    assert body["facts"] == f"{count_text(body['numel'])} params · grad {number(body['param_grad_norm'], compact=True)}"
    assert count_text(1234) == "1.2k" and count_text(12_345_678) == "12.3M" and count_text(7) == "7"


def test_meta_boxes_say_the_bytes_saved_for_backward():
    from pathlib import Path

    g = gradviz.trace(Path(__file__).resolve().parent.parent / "samples" / "transformer.py", meta=True)
    view = collapse(g, expanded=auto_expanded(g))
    (fold,) = (a for a in view.nodes.values() if a.get("fold"))
    assert fold["activation_bytes"] > 0 and "grad" not in fold["facts"]
    assert fold["facts"].endswith(f"{byte_size(fold['activation_bytes'])} saved")


def test_the_grad_figure_follows_live_norms(qapp):
    """While training the boxes' colours follow the live norms; their "grad" figure does too."""
    from gradviz.render.primitives.style import layout_graph
    from gradviz.render.scene.scene import GraphScene

    _, g, _ = traced("gpt2")
    view = collapse(g, expanded=auto_expanded(g))
    (fid,) = (n for n, a in view.nodes(data=True) if a.get("fold"))
    scene = GraphScene()
    scene.set_graph(view, layout_graph(view))
    i = scene.index[fid]
    assert scene.text_lines(i)[1].endswith(f"grad {number(view.nodes[fid]['param_grad_norm'], compact=True)}")
    scene.set_norms({fid: 0.5}, step=3, source="training")
    assert scene.text_lines(i)[1].endswith("params · grad 0.5")


def test_a_run_of_containers_stays_one_fold():
    """Three identical stages, each a Sequential of two identical Linears: the stages fold
    ("Sequential × 3"); opening each stage onto its own fold would split that fold in three."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4)) for _ in range(3)])
    x = torch.randn(2, 4)
    with gradviz.capture(model) as cap:
        loss = model(x).pow(2).mean()
    g = gradviz.trace(loss, model, capture=cap)
    assert folds(collapse(g, expanded=auto_expanded(g))) == ["Sequential × 3"]
    assert folds(collapse(g, expanded=expanded_to_depth(g, 1))) == ["Sequential × 3"]   # --collapse 1 too
