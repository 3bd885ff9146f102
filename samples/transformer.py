"""A GPT-style decoder-only transformer on a synthetic copy task.

    tokens -> tok_emb + pos_emb -> N x Block -> ln_f -> lm_head -> cross-entropy

Each ``Block`` is pre-LayerNorm: ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``. The
causal self-attention spells out its ``q_proj``/``k_proj``/``v_proj``/``out_proj``
Linear layers and the masked softmax (no ``nn.MultiheadAttention``, no fused
``scaled_dot_product_attention``), so every step is visible in the autograd graph,
with module names like ``blocks.3.attn.q_proj``. The residual stream is kept as
``(batch * seq, d_model)`` rows, so each Linear is a single ``addmm`` in the graph.

Task: each sequence is a random pattern of ``SEQ_LEN // 2`` tokens repeated; the model
predicts the next token. The first repetition is unpredictable (ignored in the loss),
the second can be copied from context, which a causal attention layer learns.

Size: the module-level constants below; ``GRADVIZ_GPT_BLOCKS`` and ``GRADVIZ_GPT_DMODEL``
override depth and width. Benchmarks build bigger stacks with ``make_gpt(n_blocks)``.
55 autograd nodes per block (AccumulateGrad leaves included; torch 2.x), plus 16 for
embeddings, final norm, head and loss: 236 nodes at 4 blocks, 2,656 at 48, 11,016 at 200.
"""
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

N_BLOCKS = int(os.environ.get("GRADVIZ_GPT_BLOCKS", 4))
D_MODEL = int(os.environ.get("GRADVIZ_GPT_DMODEL", 64))
N_HEADS = 4
SEQ_LEN = 32
VOCAB = 64
BATCH = 8
IGNORE = -100          # target value cross_entropy skips


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq_len: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor, T: int) -> torch.Tensor:
        # x: (B*T, C) token rows -> per-head (B*heads, T, head_dim)
        BT, C = x.shape
        B, H, D = BT // T, self.n_heads, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        k = self.k_proj(x).view(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        v = self.v_proj(x).view(B, T, H, D).transpose(1, 2).reshape(B * H, T, D)
        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(D)          # (B*H, T, T)
        scores = scores.masked_fill(~self.causal_mask[:T, :T], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        y = torch.bmm(weights, v)                                          # (B*H, T, D)
        y = y.view(B, H, T, D).transpose(1, 2).reshape(BT, C)
        return self.out_proj(y)


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq_len: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, seq_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x: torch.Tensor, T: int) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), T)
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, n_blocks: int = N_BLOCKS, d_model: int = D_MODEL, n_heads: int = N_HEADS,
                 vocab: int = VOCAB, seq_len: int = SEQ_LEN):
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, seq_len) for _ in range(n_blocks))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's {self.seq_len}")
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)          # (B, T, C)
        x = x.view(-1, x.shape[-1])                         # residual stream as (B*T, C) rows
        for block in self.blocks:
            x = block(x, T)
        logits = self.lm_head(self.ln_f(x))
        return logits.view(idx.shape[0], T, -1)             # (B, T, vocab)


def make_gpt(n_blocks: int, d_model: int = 64, n_heads: int = 4, vocab: int = 64,
             seq_len: int = 32) -> nn.Module:
    """A fresh GPT with ``n_blocks`` blocks (benchmarks use 12, 48, 100, 200)."""
    return GPT(n_blocks, d_model, n_heads, vocab, seq_len)


def model() -> nn.Module:
    return make_gpt(N_BLOCKS, D_MODEL, N_HEADS, VOCAB, SEQ_LEN)


def make_batch(step: int, batch_size: int = BATCH, seq_len: int = SEQ_LEN, vocab: int = VOCAB):
    """Inputs (B, T) token ids and next-token targets (B, T); unpredictable ones = IGNORE."""
    g = torch.Generator().manual_seed(int(step))
    period = seq_len // 2
    pattern = torch.randint(vocab, (batch_size, period), generator=g)
    seq = pattern.repeat(1, 3)[:, : seq_len + 1]
    inputs, targets = seq[:, :-1].clone(), seq[:, 1:].clone()
    targets[:, : period - 1] = IGNORE      # first repetition: nothing to copy from yet
    return inputs, targets


def batch(step: int):
    return make_batch(step)


def loss_fn(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def optimizer(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.0)


@torch.no_grad()
def metrics(model: nn.Module) -> dict[str, float]:
    """Next-token accuracy on the copyable half of held-out sequences."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        inputs, targets = make_batch(10**9, batch_size=64)      # steps never used in training
        pred = model(inputs.to(device)).argmax(-1).cpu()
        keep = targets != IGNORE
        return {"accuracy": float((pred[keep] == targets[keep]).float().mean())}
    finally:
        model.train(was_training)
