"""The real-model corpus: architectures nobody on this project wrote, small configs, random weights.

Each entry builds a model from a library (transformers, torch.nn built-ins, torch.utils
features), a batch and a loss, exactly as a user's script would. ``zoo.py`` exposes the one
named by ``GRADVIZ_CORPUS`` as a gradviz model script. Nothing is downloaded.

Each must check clean (no error, no warning); several are the regression tests of false
alarms gradviz used to raise (named in ``REGRESSION``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Entry:
    model: Callable[[], nn.Module]
    batch: Callable[[int], tuple]
    compute_loss: Callable | None = None      # compute_loss(model, inputs, targets), else loss_fn
    loss_fn: Callable | None = None
    library: str = "transformers"


def _gen(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + step)


def tokens(vocab: int, shape=(2, 12)):
    def batch(step):
        ids = torch.randint(vocab, shape, generator=_gen(step))
        return ids, ids
    return batch


def images(channels: int, size: int, classes: int, n: int = 2):
    def batch(step):
        g = _gen(step)
        return torch.randn(n, channels, size, size, generator=g), torch.randint(classes, (n,), generator=g)
    return batch


def hf_labels(model, inputs, targets):
    return model(inputs[0], labels=targets).loss


def hf_logits_ce(model, inputs, targets):
    return F.cross_entropy(model(inputs[0]).logits, targets)


# -- transformers: language ---------------------------------------------------------

def gpt2(checkpointing: bool = False):
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    if checkpointing:   # reentrant: the forward runs under no_grad, backward re-runs it with grad
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    return m


def bert():
    from transformers import BertConfig, BertForSequenceClassification
    return BertForSequenceClassification(BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64, num_labels=3,
                                                    max_position_embeddings=32))


def bert_batch(step):
    g = _gen(step)
    return torch.randint(96, (2, 12), generator=g), torch.randint(3, (2,), generator=g)


def t5():
    from transformers import T5Config, T5ForConditionalGeneration
    return T5ForConditionalGeneration(T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                               num_decoder_layers=2, num_heads=4, decoder_start_token_id=0))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))


def whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=96, num_mel_bins=8, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=8,
        max_target_positions=16, decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def whisper_batch(step):
    g = _gen(step)
    return torch.randn(2, 8, 16, generator=g), torch.randint(3, 96, (2, 6), generator=g)


def whisper_loss(model, inputs, targets):
    return model(input_features=inputs[0], labels=targets).loss


# -- transformers: vision -------------------------------------------------------------

def resnet():
    from transformers import ResNetConfig, ResNetForImageClassification
    return ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                     num_labels=3, layer_type="basic"))


def convnext():
    from transformers import ConvNextConfig, ConvNextForImageClassification
    return ConvNextForImageClassification(ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16],
                                                         depths=[1, 1], num_labels=3))


def vit_zero_head():
    """ViT whose classifier starts at zero, as torchvision's ViT does by design."""
    from transformers import ViTConfig, ViTForImageClassification
    m = ViTForImageClassification(ViTConfig(image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=2, intermediate_size=64, num_labels=3))
    nn.init.zeros_(m.classifier.weight)
    nn.init.zeros_(m.classifier.bias)
    return m


def mobilenet():
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification
    return MobileNetV2ForImageClassification(MobileNetV2Config(image_size=32, depth_multiplier=0.25,
                                                               num_labels=3))


# -- torch.nn built-ins and torch features ---------------------------------------------

class Recurrent(nn.Module):
    def __init__(self, cell: type[nn.Module]):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.rnn = cell(16, 24, num_layers=2, batch_first=True)
        self.out = nn.Linear(24, 4)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.out(h[:, -1])


def seq_classes(step):
    g = _gen(step)
    return torch.randint(50, (4, 10), generator=g), torch.randint(4, (4,), generator=g)


class MHAPool(nn.Module):
    """nn.MultiheadAttention with a key padding mask (every row keeps unmasked keys)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.out = nn.Linear(16, 4)

    def forward(self, ids):
        x = self.emb(ids)
        pad = ids == 0
        pad[:, 0] = False
        h, _ = self.attn(x, x, x, key_padding_mask=pad)
        return self.out(h.mean(1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.out = nn.Linear(16, 4)

    def forward(self, ids):
        return self.out(self.enc(self.emb(ids)).mean(1))


class Checkpointed(nn.Module):
    """torch.utils.checkpoint in reentrant mode around each block (after a stem, so the blocks' input
    requires grad, as reentrant checkpointing needs)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(16, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        x = self.stem(x)
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=True)
        return self.out(x)


class Normalised(nn.Module):
    """spectral_norm (power iteration, buffers), weight_norm and orthogonal parametrizations."""

    def __init__(self):
        super().__init__()
        from torch.nn.utils import parametrizations as P
        self.a = P.spectral_norm(nn.Linear(16, 24))
        self.b = P.weight_norm(nn.Linear(24, 24))
        self.c = P.orthogonal(nn.Linear(24, 24))
        self.d = torch.nn.utils.spectral_norm(nn.Linear(24, 4))   # the older hook-based form

    def forward(self, x):
        return self.d(torch.tanh(self.c(torch.relu(self.b(torch.relu(self.a(x)))))))


class TiedSparse(nn.Module):
    """A language model with tied input/output embeddings and a sparse-gradient embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.extra = nn.Embedding(50, 16, sparse=True)
        self.mix = nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.emb(ids) + self.extra(ids))))


def tied_loss(out, ids):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), ids.reshape(-1))


def vectors(classes: int = 4):
    def batch(step):
        g = _gen(step)
        return torch.randn(8, 16, generator=g), torch.randint(classes, (8,), generator=g)
    return batch


def bf16_mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def bf16_loss(model, inputs, targets):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(inputs[0])
    return F.cross_entropy(out.float(), targets)


def compiled():
    net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    return torch.compile(net, backend="aot_eager")


def _ce(out, targets):
    return F.cross_entropy(out, targets)


MODELS: dict[str, Entry] = {
    "gpt2": Entry(gpt2, tokens(96), hf_labels),
    "gpt2-checkpointing": Entry(lambda: gpt2(checkpointing=True), tokens(96), hf_labels),
    "bert": Entry(bert, bert_batch, hf_labels),
    "t5": Entry(t5, tokens(96), hf_labels),
    "llama": Entry(llama, tokens(96), hf_labels),
    "whisper": Entry(whisper, whisper_batch, whisper_loss),
    "resnet": Entry(resnet, images(3, 32, 3), hf_labels),
    "convnext": Entry(convnext, images(3, 32, 3), hf_labels),
    "vit-zero-head": Entry(vit_zero_head, images(3, 16, 3), hf_logits_ce),
    # 8 images, not 2: training-mode BatchNorm over 2 images (1x1 maps in the last stages) is a truly
    # unstable model (first conv's gradient 1.4e3-1.4e4 by batch, SGD lr 0.01 takes the loss 0.9 -> 36):
    # `exploding` is right there. With 8: 1.2e3-1.9e3, and it trains.
    "mobilenet-v2": Entry(mobilenet, images(3, 32, 3, n=8), hf_logits_ce),
    "lstm": Entry(lambda: Recurrent(nn.LSTM), seq_classes, loss_fn=_ce, library="torch.nn"),
    "gru": Entry(lambda: Recurrent(nn.GRU), seq_classes, loss_fn=_ce, library="torch.nn"),
    "multihead-attention": Entry(MHAPool, seq_classes, loss_fn=_ce, library="torch.nn"),
    "transformer-encoder": Entry(Encoder, seq_classes, loss_fn=_ce, library="torch.nn"),
    "checkpoint-reentrant": Entry(Checkpointed, vectors(), loss_fn=_ce, library="torch.utils.checkpoint"),
    "spectral-weight-orthogonal": Entry(Normalised, vectors(), loss_fn=_ce, library="torch.nn.utils"),
    "tied-sparse-embedding": Entry(TiedSparse, tokens(50, (4, 10)), loss_fn=tied_loss, library="torch.nn"),
    "bf16-autocast": Entry(bf16_mlp, vectors(), bf16_loss, library="torch.autocast"),
    "torch-compile": Entry(compiled, vectors(), loss_fn=_ce, library="torch.compile"),
}

# the false alarms of issue #13 each entry guards against
REGRESSION = {
    "gpt2-checkpointing": "reentrant checkpointing reported as unreachable",
    "checkpoint-reentrant": "reentrant checkpointing reported as unreachable",
    "t5": "gradcheck-mismatch from T5's float32 layer norm inside the float64 check",
    "mobilenet-v2": "gradcheck-mismatch from BatchNorm curvature at eps=1e-6 (autograd right)",
    "spectral-weight-orthogonal": "power-iteration state blamed on a custom backward",
    "vit-zero-head": "zero-initialised head reported as vanishing gradients",
    "torch-compile": "gradviz's hooks broke the compiled graph",
}
