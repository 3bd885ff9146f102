"""``gradviz.show(loss, model=m)`` without ``gradviz.capture`` folds repeated blocks as with it (issues #28, #30).

Without capture the modules come from the parameters and forward order (autograd sequence numbers,
core/trace/module_guess.py); the watched forward (``gradviz.capture``) is the oracle: the same runs, and
every op of a block placed in that block."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.layout.auto_view import AUTO_BOXES, auto_expanded
from gradviz.core.layout.folding import find_repeats
from gradviz.core.layout.grouping import collapse, visible_count


def traced_both(model, run):
    """The graph of ``run(model)`` traced with capture and without (same forward, same node ids)."""
    with gradviz.capture(model) as cap:
        loss = run(model)
    watched = gradviz.trace(loss, model=model, capture=cap)
    guessed = gradviz.trace(run(model), model=model)
    return watched, guessed


def block_of(module: str, parent: str) -> str:
    """``parent.<i>`` holding ``module``, or '' when it is outside every block."""
    if not module.startswith(parent + "."):
        return ""
    return parent + "." + module[len(parent) + 1:].split(".")[0]


def fold_labels(graph) -> list[str]:
    view = collapse(graph, expanded=auto_expanded(graph))
    return sorted(a["label"] for _, a in view.nodes(data=True) if a.get("fold"))


def assert_blocks_agree(watched, guessed, parent):
    """Every op is in the same block (or outside all of them) with and without capture."""
    wrong = [(n, watched.nodes[n]["module"], a["module"]) for n, a in guessed.nodes(data=True)
             if a.get("kind") == "op" and block_of(watched.nodes[n]["module"], parent) != block_of(a["module"], parent)]
    assert wrong == []


def test_gpt2_without_capture_folds_as_with_it():
    """transformers' GPT-2 (tied lm_head): main's neighbour guess put each block's last residual add on
    ``transformer.h``, so no block fed the next and nothing folded."""
    import transformers  # a test dependency: never skipped (tests/test_honest_skips.py)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_embd=32, n_head=2, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 16))
    watched, guessed = traced_both(model, lambda m: m(ids, labels=ids).loss)
    runs = [{"parent": "transformer.h", "type": "GPT2Block", "members": [f"transformer.h.{i}" for i in range(4)]}]
    assert find_repeats(watched) == runs and find_repeats(guessed) == runs
    assert_blocks_agree(watched, guessed, "transformer.h")
    assert fold_labels(guessed) == ["GPT2Block × 4"] == fold_labels(watched)
    assert visible_count(guessed, auto_expanded(guessed)) <= AUTO_BOXES
    # the tied weight's two reads: the embedding in wte, the output projection in lm_head
    reads = {guessed.nodes[s]["op"]: guessed.nodes[s]["module"] for s in guessed.successors("param:transformer.wte.weight")}
    assert reads == {"EmbeddingBackward0": "transformer.wte", "TBackward0": "lm_head"}
    assert "GPT2Block × 4" in gradviz.show(model(ids, labels=ids).loss, model=model).svg   # the notebook call


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def test_a_sequential_of_identical_blocks_folds_and_the_loss_stays_outside():
    """The last block is bounded by nothing (the loss follows it): it ends as the block before it did."""
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(8) for _ in range(5)))
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    watched, guessed = traced_both(model, lambda m: nn.functional.mse_loss(m(x), y))
    runs = [{"parent": "", "type": "Block", "members": [str(i) for i in range(5)]}]
    assert find_repeats(watched) == runs and find_repeats(guessed) == runs
    assert_blocks_agree(watched, guessed, "")
    loss_ops = [a["op"] for _, a in guessed.nodes(data=True) if a.get("kind") == "op" and not a["module"]]
    assert sorted(loss_ops) == ["MseLossBackward0"]
    assert fold_labels(guessed) == ["Block × 5"]


class Heads(nn.Module):
    """Identical heads run side by side on one input (tests/test_folding.py): not in sequence."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        return sum(h(x) for h in self.heads)


def test_parallel_heads_do_not_fold_without_capture():
    """The sums join two heads: they stay with the parent, so no head feeds the next."""
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    watched, guessed = traced_both(Heads(), lambda m: nn.functional.mse_loss(m(x), y))
    assert find_repeats(watched) == [] and find_repeats(guessed) == []
    assert fold_labels(guessed) == []


REAL_MODELS = ["gpt2", "resnet", "bert", "t5", "llama", "vit", "convnext", "whisper", "nn.Transformer"]


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_models_find_the_runs_capture_finds(name):
    """The nine library models of tests/test_auto_view.py (issue #30), traced from their loss alone: the same
    runs as a watched forward finds, and the same folds in the automatic view. T5's first block owns the
    relative attention bias and is no repeat: it ends as the repeats do (the RMSNorm steps before block 1's
    weight read), else those steps sat loose in ``encoder.block`` and kept both stacks closed."""
    import transformers  # noqa: F401  (a test dependency: never skipped)
    from test_auto_view import EXPECTED

    torch.manual_seed(0)
    model, loss_of = EXPECTED[name][0]()
    watched, guessed = traced_both(model, loss_of)
    assert find_repeats(guessed) == find_repeats(watched) != []
    assert fold_labels(guessed) == fold_labels(watched)


def test_the_sample_gpt_folds_its_blocks_and_not_its_parallel_projections():
    """samples/transformer.py: q, k and v are identical Linears run side by side, each reshaping its own
    output; an early version moved those reshapes into the next projection and folded "Linear × 3"."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
    import transformer as gpt

    torch.manual_seed(0)
    x, y = gpt.make_batch(0)
    watched, guessed = traced_both(gpt.make_gpt(3, 32), lambda m: gpt.loss_fn(m(x), y))
    assert find_repeats(guessed) == find_repeats(watched) == [
        {"parent": "blocks", "type": "Block", "members": ["blocks.0", "blocks.1", "blocks.2"]}]
    assert_blocks_agree(watched, guessed, "blocks")
