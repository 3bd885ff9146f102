"""Parameters tied by storage (two Parameter objects over one tensor's bytes) are one parameter in ``watch``.

``load_state_dict(state, assign=True)`` of a state dict that holds a tied weight once under two keys
makes one Parameter per key over the same storage (as do ``nn.Parameter(other)`` and programs rebuilt
by older torches). Torch is the oracle: the same model tied in Python (one object) gives the gradient
of the shared bytes, which the watch must record once, under the first name, and name the tie in meta.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.core.record import open_run, watch
from gradviz.core.stats.steps import StepStats, step_columns


class TiedLM(nn.Module):
    def __init__(self, tie: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        if tie:
            self.head.weight = self.emb.weight          # one object under two names

    def forward(self, x):
        return self.head(torch.tanh(self.mix(self.emb(x))))


def _pair():
    """(the model tied in Python, the same weights as two objects over one storage)."""
    torch.manual_seed(0)
    python_tied = TiedLM()
    storage_tied = TiedLM(tie=False)
    storage_tied.load_state_dict(python_tied.state_dict(), assign=True)
    a, b = storage_tied.emb.weight, storage_tied.head.weight
    assert a is not b and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    return python_tied, storage_tied


def _backward(model, x):
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()


def test_watch_records_a_storage_tie_once_with_the_summed_gradient(tmp_path):
    python_tied, model = _pair()
    x = torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(1))
    _backward(python_tied, x)
    want = {n: p.grad.norm().item() for n, p in python_tied.named_parameters()}   # emb.weight once
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with watch(model, tmp_path / "r.gvrun", every=0, optimizer=opt) as w:
        _backward(model, x)
        w.step(1.0)
        opt.step()
    with open_run(tmp_path / "r.gvrun") as run:
        names = run.meta["param_names"]
        assert names == list(want)                               # no column of its own for head.weight
        assert run.meta["storage_ties"] == [["emb.weight", "head.weight"]]
        cols = run.steps()
    np.testing.assert_allclose(cols["grad_norms"][0], [want[n] for n in names], rtol=1e-5)
    np.testing.assert_allclose(cols["grad_norm"][0], np.sqrt(sum(v * v for v in want.values())), rtol=1e-5)
    # the sum is not either object's own gradient
    own = model.emb.weight.grad.norm().item()
    assert abs(own - want["emb.weight"]) > 1e-3 * want["emb.weight"]


def test_a_tie_written_in_python_is_named_too(tmp_path):
    torch.manual_seed(0)
    model = TiedLM()
    with watch(model, tmp_path / "r.gvrun", every=0) as w:
        _backward(model, torch.randint(0, 20, (2, 3)))
        w.step(1.0)
    with open_run(tmp_path / "r.gvrun") as run:
        assert run.meta["storage_ties"] == [["emb.weight", "head.weight"]]
        assert "head.weight" not in run.meta["param_names"]


@pytest.mark.parametrize("strategy", ["host", "device"])
def test_step_stats_clip_a_storage_tie_as_torch_clips_the_python_tie(strategy):
    python_tied, model = _pair()
    x = torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(2))
    _backward(python_tied, x)
    total = torch.nn.utils.clip_grad_norm_(python_tied.parameters(), 0.05)          # torch's clip of the tie
    _backward(model, x)
    stats = StepStats(model.named_parameters(), strategy=strategy)
    assert stats.tie_names() == [["emb.weight", "head.weight"]]
    got = stats.grads_ready(max_norm=0.05)
    np.testing.assert_allclose(float(got), float(total), rtol=1e-5)
    cols = step_columns([stats.numbers()])
    np.testing.assert_allclose(cols["grad_norm"][0], float(total), rtol=1e-5)
    summed = model.emb.weight.grad + model.head.weight.grad              # what the shared bytes receive
    np.testing.assert_allclose(summed, python_tied.emb.weight.grad, rtol=1e-5, atol=1e-8)


def test_a_tied_object_without_a_gradient_of_its_own_still_counts(tmp_path):
    """Only the second name is used in forward: the group has a gradient though its first object has none."""
    torch.manual_seed(0)
    _, model = _pair()
    out = nn.functional.linear(torch.randn(3, 8), model.head.weight)     # emb.weight (first name) unused
    model.zero_grad(set_to_none=True)
    out.pow(2).sum().backward()
    assert model.emb.weight.grad is None
    stats = StepStats(model.named_parameters())
    stats.grads_ready()
    cols = step_columns([stats.numbers()])
    k = stats.names.index("emb.weight")
    assert cols["has_grad"][0][k]
    np.testing.assert_allclose(cols["param_norms"][0][k], model.head.weight.grad.norm().item(), rtol=1e-6)


def test_empty_views_of_one_storage_are_not_a_tie():
    """FSDP1's flat parameter leaves a rank's absent parameters as empty views, several at one offset."""
    flat = torch.zeros(10)
    a, b = nn.Parameter(flat[10:]), nn.Parameter(flat[10:])
    stats = StepStats([("a", a), ("b", b)])
    assert stats.names == ["a", "b"] and stats.tie_names() == []


def test_a_model_changed_under_the_watch_keeps_its_storage_tie_one_column(tmp_path):
    python_tied, model = _pair()
    x = torch.randint(0, 20, (4, 6), generator=torch.Generator().manual_seed(3))
    with watch(model, tmp_path / "r.gvrun", every=0) as w:
        _backward(model, x)
        w.step(1.0)
        model.mix = nn.Linear(8, 8)                 # replaced mid-run: followed from the next step
        python_tied.mix.load_state_dict(model.mix.state_dict())
        _backward(model, x)
        w.step(1.0)
    _backward(python_tied, x)
    with open_run(tmp_path / "r.gvrun") as run:
        assert run.meta["param_names"] == ["emb.weight", "mix.weight", "mix.bias"]
        assert run.meta["model_changes"][0]["replaced"] == ["mix.weight", "mix.bias"]
        assert not run.meta["model_changes"][0]["added"]
        last = run.steps()["grad_norms"][-1]
    np.testing.assert_allclose(last, [p.grad.norm().item() for p in python_tied.parameters()], rtol=1e-5)
