"""Compare on a model from a library: transformers' GPT-2 (small config, random weights) recorded
with gradviz.watch, before and after a fix that stops detaching the transformer's output."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

import gradviz
from gradviz.cli.main import main
from gradviz.core.record.compare import compare
from gradviz.core.record.compare_view import compare_views, scale_range
from gradviz.core.record.reader import open_run


class Probe(nn.Module):
    def __init__(self, detach: bool):
        super().__init__()
        self.detach = detach
        self.gpt = GPT2Model(GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=40, n_positions=8,
                                        bos_token_id=0, eos_token_id=0))
        self.head = nn.Linear(16, 3)

    def forward(self, ids):
        hidden = self.gpt(ids).last_hidden_state[:, -1]
        return self.head(hidden.detach() if self.detach else hidden)


def record(path, detach, steps=6):
    torch.manual_seed(0)
    model = Probe(detach)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with gradviz.watch(model, path, every=2, optimizer=opt) as w:
        for s in range(steps):
            g = torch.Generator().manual_seed(s)
            ids, y = torch.randint(0, 40, (4, 8), generator=g), torch.randint(3, (4,), generator=g)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(ids), y)
            loss.backward()
            w.step(loss)
            opt.step()
    return path


@pytest.fixture(scope="module")
def gpt_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt")
    return record(d / "before.gvrun", True), record(d / "after.gvrun", False)


def test_gpt2_steps_of_one_run(gpt_runs):
    _, after = gpt_runs
    c = compare(f"{after}@first", f"{after}@last")
    assert c.matched_by == "id" and (c.a.step, c.b.step) == (0, 5)
    with open_run(after) as r:
        names = r.param_names
        row0, row5 = r.step_row(0), r.step_row(5)
    assert sorted(ch.name for ch in c.params) == sorted(names) and len(names) > 20
    for ch in c.params:
        i = names.index(ch.name)
        assert ch.a == pytest.approx(row0["grad_norms"][i]) and ch.b == pytest.approx(row5["grad_norms"][i])
    assert len(c.nodes) > 50 and all(ch.id_a == ch.name for ch in c.nodes)


def test_gpt2_before_and_after_the_fix(gpt_runs, capsys):
    before, after = gpt_runs
    c = compare(before, after)
    assert c.matched_by == "structure"
    gpt = [ch for ch in c.params if ch.name.startswith("gpt.")]
    head = [ch for ch in c.params if ch.name.startswith("head.")]
    # the transformer's gradients appeared with the fix and rank first; the head's are on both sides
    assert gpt and all(ch.change == "appeared" for ch in gpt)
    assert [ch.change for ch in c.params[:len(gpt)]] == ["appeared"] * len(gpt)
    assert all(ch.a is not None and ch.b is not None and math.isfinite(ch.ratio) for ch in head)
    # the transformer's ops are matched by module, op and order across the two graphs
    matched = [ch for ch in c.nodes if ch.module.startswith("gpt.h.1")]
    assert matched and all(ch.change == "appeared" for ch in matched)
    views = compare_views(c)
    wte = views.ratio.nodes.get("param:gpt.wte.weight") or next(
        a for n, a in views.ratio.nodes(data=True) if a.get("kind") == "group" and a.get("module") == "gpt")
    assert wte["grad_norm"] == scale_range(views.limit)[1]     # appeared: its own colour, past the red end
    assert main(["runs", "diff", str(before), str(after), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "appeared  gpt." in out
