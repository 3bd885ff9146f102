"""Boxes in the first picture of nine real models: gradviz's automatic view beside torchview's
and TorchLens's defaults, for the same models (issue #30).

    python benchmarks/peer_box_counts.py gradviz                       # gradviz's venv
    /work/vpeers/bin/python benchmarks/peer_box_counts.py torchview    # a venv with torchview
    /work/vpeers/bin/python benchmarks/peer_box_counts.py torchlens    # ... with torchlens

Models: transformers from tiny configs at real depths (GPT-2 12 blocks, BERT 6, T5 6+6, Llama
8, ViT 6, ResNet 3-4-6-3 bottlenecks, ConvNeXt 3-3-9-3, Whisper 4+4) and nn.Transformer 6+6,
random weights. gradviz counts every item of its view (module and fold boxes, loose ops,
parameters, inputs, the loss); torchview and TorchLens count the nodes of the Graphviz source
they write (torchview ``draw_graph`` at its default depth 3; TorchLens ``trace(...).draw()``
as it is and with ``collapse="auto"``). A model a tool fails on prints its error (torchview
0.2.7 with transformers 5.24 fails on GPT-2, T5, Llama and Whisper with a KeyError in its edge
table); TorchLens takes minutes on the larger ones, so run it under ``timeout``.
"""
from __future__ import annotations

import re
import sys
import tempfile
import time

import torch
from torch import nn


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=12, n_head=2))
    ids = torch.randint(96, (2, 12))
    return m, lambda m: m(ids, labels=ids).loss


def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification
    m = ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[3,
        4, 6, 3], num_labels=3, layer_type="bottleneck"))
    x = torch.randn(2, 3, 32, 32)
    y = torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def bert():
    from transformers import BertConfig, BertForSequenceClassification
    m = BertForSequenceClassification(BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=6,
        num_attention_heads=2, intermediate_size=64, num_labels=3, max_position_embeddings=32))
    ids = torch.randint(96, (2, 12))
    y = torch.tensor([0, 1])
    return m, lambda m: m(ids, labels=y).loss


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    m = T5ForConditionalGeneration(T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=6,
        num_decoder_layers=6, num_heads=4, decoder_start_token_id=0))
    ids = torch.randint(96, (2, 12))
    return m, lambda m: m(ids, labels=ids).loss


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    m = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
        num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))
    ids = torch.randint(96, (2, 12))
    return m, lambda m: m(ids, labels=ids).loss


def vit():
    from transformers import ViTConfig, ViTForImageClassification
    m = ViTForImageClassification(ViTConfig(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=6,
        num_attention_heads=2, intermediate_size=64, num_labels=3))
    x = torch.randn(2, 3, 16, 16)
    y = torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification
    m = ConvNextForImageClassification(ConvNextConfig(num_channels=3, num_stages=4, hidden_sizes=[8, 16, 16, 16],
                                                      depths=[3, 3, 9, 3], num_labels=3))
    x = torch.randn(2, 3, 32, 32)
    y = torch.tensor([0, 1])
    return m, lambda m: m(x, labels=y).loss


def whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    m = WhisperForConditionalGeneration(WhisperConfig(vocab_size=96, num_mel_bins=8, d_model=32,
        encoder_layers=4, decoder_layers=4, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=8, max_target_positions=16,
        decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    x = torch.randn(2, 8, 16)
    y = torch.randint(3, 96, (2, 6))
    return m, lambda m: m(input_features=x, labels=y).loss


def transformer():
    m = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=32,
        batch_first=True)
    s = torch.randn(2, 5, 16)
    t = torch.randn(2, 4, 16)
    return m, lambda m: m(s, t).pow(2).mean()
MODELS = dict(gpt2=gpt2, resnet=resnet, bert=bert, t5=t5, llama=llama, vit=vit, convnext=convnext, whisper=whisper,
              transformer=transformer)


def forward_inputs(name: str):
    """(args, kwargs) of a plain forward of each model, for the peers (they draw forwards)."""
    ids = torch.randint(96, (2, 12), generator=torch.Generator().manual_seed(0))
    if name == "t5":
        return (), {"input_ids": ids, "decoder_input_ids": ids}
    if name == "whisper":
        return (), {"input_features": torch.randn(2, 8, 16), "decoder_input_ids": torch.randint(3, 96, (2, 6))}
    if name == "transformer":
        return (torch.randn(2, 5, 16), torch.randn(2, 4, 16)), {}
    if name in ("resnet", "convnext"):
        return (torch.randn(2, 3, 32, 32),), {}
    if name == "vit":
        return (torch.randn(2, 3, 16, 16),), {}
    return (ids,), {}


def dot_nodes(source: str) -> int:
    """Node statements in a Graphviz source (not edges, attributes or subgraph lines)."""
    n = 0
    for line in source.splitlines():
        s = line.strip()
        if not s or "->" in s or s.startswith(("subgraph", "}", "graph", "node", "edge", "digraph", "label",
        "style")):
            continue
        n += bool(re.match(r'^"?[^\s\[]+"?\s*\[', s))
    return n


def count_gradviz(name: str, model, loss_of) -> str:
    import gradviz
    from gradviz.core.layout.auto_view import auto_expanded
    from gradviz.core.layout.grouping import collapse

    with gradviz.capture(model) as cap:
        loss = loss_of(model)
    g = gradviz.trace(loss, model, capture=cap)
    view = collapse(g, expanded=auto_expanded(g))
    folds = sorted(a["label"] for a in view.nodes.values() if a.get("fold"))
    return f"{view.number_of_nodes()} ({', '.join(folds) or 'no fold'})"


def count_torchview(name: str, model, _) -> str:
    import torchview
    args, kwargs = forward_inputs(name)
    g = torchview.draw_graph(model, input_data=kwargs or list(args))
    return str(dot_nodes(g.visual_graph.source))


def count_torchlens(name: str, model, _) -> str:
    import torchlens
    args, kwargs = forward_inputs(name)
    tr = torchlens.trace(model, args if args else None, input_kwargs=kwargs or None)
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for label, extra in (("default", {}), ("collapse=auto", {"collapse": "auto"})):
            path = f"{folder}/{name}-{label}"
            dot = tr.draw(vis_save_only=True, vis_outpath=path, vis_fileformat="svg", **extra)
            source = dot if isinstance(dot, str) and "->" in dot else open(path).read()
            out.append(f"{label} {dot_nodes(source)}")
    return ", ".join(out)


def main() -> None:
    tool = sys.argv[1] if len(sys.argv) > 1 else "gradviz"
    count = {"gradviz": count_gradviz, "torchview": count_torchview, "torchlens": count_torchlens}[tool]
    for name, build in MODELS.items():
        torch.manual_seed(0)
        model, loss_of = build()
        if tool != "gradviz":
            model.eval()
        t = time.perf_counter()
        try:
            result = count(name, model, loss_of)
        except Exception as exc:   # a peer failing on a model is a result: print it, go on
            result = f"failed: {type(exc).__name__}: {str(exc)[:80]}"
        print(f"{name:<12} {tool:<10} {result}  ({time.perf_counter() - t:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
