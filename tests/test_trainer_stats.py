"""StepStats and NodeNormSampler: the batched engine pieces (no Qt)."""
from __future__ import annotations

import functools
import gc
import math
import weakref

import numpy as np
import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.trace.nodenorms import NodeNormSampler, node_ids_for, prepare_inputs
from gradviz.core.script.load import load_script
from gradviz.core.stats.steps import StepStats
from gradviz.core.trace.walk import walk

from conftest import SAMPLES


def _net(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    m.extra = nn.Linear(2, 2)           # never used: its grad stays None
    return m


def _backward(m, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(11, 5, generator=g)
    y = torch.randn(11, 3, generator=g)
    loss = ((m[2](m[1](m[0](x))) - y) ** 2).mean()
    loss.backward()
    return loss


@pytest.fixture(params=["host", "device"])
def path(request):
    """StepStats' norm strategies: numpy on views of CPU tensors, and torch foreach (+ one copy)."""
    return request.param


def _stats(m, path, **kw):
    st = StepStats(m.named_parameters(), strategy=path, **kw)
    assert st.strategy == path
    return st


def test_stepstats_norms_updates_and_loss(path):
    m = _net()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    st = _stats(m, path)
    st.begin()
    loss = _backward(m)
    expected = {n: p.grad.norm().item() for n, p in m.named_parameters() if p.grad is not None}
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    st.grads_ready()
    opt.step()
    st.after_update()
    row = st.finish(loss, lr=0.01)
    assert row.loss == pytest.approx(loss.item())
    for i, name in enumerate(st.names):
        if name.startswith("extra"):
            assert not row.has_grad[i] and math.isnan(row.param_norms[i])
            assert row.update_ratios[i] == 0.0
            continue
        assert row.has_grad[i]
        assert row.param_norms[i] == pytest.approx(expected[name], rel=1e-5)
        p = dict(m.named_parameters())[name]
        ratio = (p.detach() - before[name]).norm().item() / before[name].norm().item()
        assert row.update_ratios[i] == pytest.approx(ratio, rel=1e-4)
        assert row.weight_norms[i] == pytest.approx(before[name].norm().item(), rel=1e-5)
    assert row.grad_norm == pytest.approx(math.sqrt(sum(v * v for v in expected.values())), rel=1e-5)
    assert row.grad_norm_clipped == row.grad_norm
    assert row.lr == 0.01 and row.nonfinite == 0 and row.step_time > 0


def test_stepstats_clipping_matches_clip_grad_norm(path):
    ref = _net()
    _backward(ref)
    expected_total = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05).item()
    m = _net()
    st = _stats(m, path)
    st.begin()
    loss = _backward(m)
    st.grads_ready(max_norm=0.05)
    row = st.finish(loss)
    assert row.grad_norm == pytest.approx(expected_total, rel=1e-5)
    actual = math.sqrt(sum(p.grad.norm().item() ** 2 for p in m.parameters() if p.grad is not None))
    assert actual <= 0.05 + 1e-6
    assert row.grad_norm_clipped == pytest.approx(actual, rel=1e-4)
    for p, q in zip(ref.parameters(), m.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad)
    assert math.isnan(row.update_ratios[0])          # no after_update: not measured


def test_stepstats_skip_updates(path):
    m = _net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    st = _stats(m, path)
    st.begin()
    loss = _backward(m)
    st.grads_ready(updates=False)
    opt.step()
    st.after_update()
    row = st.finish(loss)
    assert np.all(np.isnan(row.update_ratios)) and row.grad_norm > 0
    assert not st.restore_weights()


@pytest.mark.parametrize("unused", [False, True])
def test_stepstats_many_vector_params_batched(unused):
    """20+ biases and norm weights: their norms come from one concatenation (CPU fast path)."""
    torch.manual_seed(3)
    layers = [m for _ in range(6) for m in (nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU())]
    net = nn.ModuleDict({"body": nn.Sequential(*layers), "spare": nn.LayerNorm(8)})   # spare: never called
    st = StepStats(net.named_parameters() if unused else
                   [(n, p) for n, p in net.named_parameters() if not n.startswith("spare")], strategy="host")
    assert st.norms.batched is not None
    for step in range(3):
        net.zero_grad()
        st.begin()
        loss = net["body"](torch.randn(5, 8, dtype=torch.float32) * (step + 1)).pow(2).mean()
        loss.backward()
        st.grads_ready(updates=False)
        row = st.finish(loss)
        for i, name in enumerate(st.names):
            grad = dict(net.named_parameters())[name].grad
            if grad is None:
                assert not row.has_grad[i]
            else:
                assert row.param_norms[i] == pytest.approx(grad.double().norm().item(), rel=1e-6), name
        expected = math.sqrt(sum(p.grad.double().norm().item() ** 2 for p in net.parameters() if p.grad is not None))
        assert row.grad_norm == pytest.approx(expected, rel=1e-6)


def test_stepstats_nonfinite_and_restore(path):
    m = _net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    st = _stats(m, path)
    st.begin()
    loss = _backward(m)
    m[0].weight.grad[0, 0] = float("nan")
    before = m[0].weight.detach().clone()
    st.grads_ready()
    opt.step()
    st.after_update()
    row = st.finish(loss)
    assert row.nonfinite == 1 and math.isnan(row.grad_norm)
    assert st.restore_weights()
    torch.testing.assert_close(m[0].weight.detach(), before)


SCRIPTS = ["mlp_digits.py", "transformer.py", "cnn.py"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_node_norms_equal_trace(name):
    script = load_script(SAMPLES / name)
    graph = gradviz.trace(script, step=2, seed=0)
    torch.manual_seed(0)
    model = script.new_model()
    inputs, targets = script.get_batch(2)
    inputs = prepare_inputs(inputs)
    loss = script.check_loss(script.compute_loss(model, inputs, targets))
    norms = NodeNormSampler(model).sample(loss, inputs=inputs)
    assert set(norms) == set(graph.nodes)
    for nid, attrs in graph.nodes(data=True):
        want, got = attrs["grad_norm"], norms[nid]
        assert (want is None) == (got is None), nid
        if want is not None:
            assert got == pytest.approx(want, rel=1e-4, abs=1e-10), nid


def test_node_sampler_removes_hooks_and_frees_graph():
    m = _net()
    sampler = NodeNormSampler(m)
    x = torch.randn(4, 5)
    h = m[0](x)
    big = torch.tanh(h)                  # saved for TanhBackward
    ref = weakref.ref(big)
    loss = m[2](big).sum()
    del big, h
    norms = sampler.sample(loss, functools.partial(loss.backward, retain_graph=True))
    calls = sampler.hook_calls
    assert calls > 0 and norms["loss"] == 1.0
    loss.backward()                      # hooks are gone: nothing counts
    assert sampler.hook_calls == calls
    del loss
    gc.collect()
    assert ref() is None                 # the sampler kept nothing of the graph


def test_node_ids_for_matches_trace_numbering():
    script = load_script(SAMPLES / "mlp_digits.py")
    run = gradviz.core.trace.tracer.trace_run(script, step=0, seed=0)
    nodes, _ = walk([run.loss.grad_fn])
    params = {id(p): n for n, p in run.model.named_parameters()}
    inputs = {id(t): i for i, t in enumerate(run.inputs)}
    assert node_ids_for(nodes, params, inputs) == [run.node_ids[fn] for fn in nodes]


def test_node_norms_unscale():
    m = _net()
    x = torch.randn(4, 5)
    loss = m[2](m[1](m[0](x))).sum()
    plain = NodeNormSampler(m).sample(loss, lambda: loss.backward(retain_graph=True))
    for p in m.parameters():
        p.grad = None
    scaled = NodeNormSampler(m).sample(loss, lambda: loss.backward(torch.tensor(8.0)), unscale=8.0)
    for nid, v in plain.items():
        if nid.startswith("op:"):
            assert scaled[nid] == pytest.approx(v, rel=1e-5)
    assert np.isclose(scaled["param:0.weight"], 8 * plain["param:0.weight"])
