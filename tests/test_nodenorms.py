"""``NodeNormSampler.hooked_backward``: every node's incoming gradient norm, checked against torch."""
import math

import numpy as np
import pytest
import torch

from gradviz.core.trace.nodenorms import NodeNormSampler, hook_plan
from gradviz.core.trace.walk import walk


def _expected(nodes, root):
    """The same norms from torch: a prehook that keeps the incoming gradients themselves."""
    seen = {}

    def keep(k):
        def hook(grad_outputs):
            gs = [g.detach().double() for g in grad_outputs if g is not None]
            if gs:
                seen[k] = math.sqrt(sum(float((g * g).sum()) for g in gs))
        return hook

    handles = [fn.register_prehook(keep(k)) for k, fn in enumerate(nodes)]
    root.backward(retain_graph=True)
    for h in handles:
        h.remove()
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_norms_match_torch_on_multi_output_and_strided_grads(dtype):
    torch.manual_seed(0)
    x = torch.randn(6, 8, dtype=dtype, requires_grad=True)
    w = torch.randn(8, 8, dtype=dtype, requires_grad=True)
    a, b = (x @ w).chunk(2, dim=1)                 # a node with two outputs
    y = (a.t() * 2).t() + torch.sigmoid(b) ** 2     # transposes: non-contiguous gradients
    loss = y.sum()
    nodes, _ = walk([loss.grad_fn])
    expected = _expected(nodes, loss)
    got = NodeNormSampler().hooked_backward(nodes, lambda: loss.backward())
    assert len(expected) >= 6
    tol = 1e-2 if dtype is torch.bfloat16 else 1e-5
    for k, value in enumerate(got):
        if k in expected:
            assert value == pytest.approx(expected[k], rel=tol), nodes[k].name()
        else:
            assert np.isnan(value)


def test_skip_missing_and_inert_hooks_after_return():
    x = torch.randn(5, requires_grad=True)
    loss = (x.exp() * 3).sum()
    nodes, _ = walk([loss.grad_fn])
    sampler = NodeNormSampler()
    skip = [k == 0 for k in range(len(nodes))]
    got = sampler.hooked_backward(nodes, lambda: loss.backward(retain_graph=True), skip, missing=-1.0)
    assert got[0] == -1.0 and (got[1:] > 0).all()
    calls = sampler.hook_calls
    loss.backward()                                  # a second backward through the same graph
    assert sampler.hook_calls == calls               # the hooks left behind do nothing


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_create_graph_gradients():
    x = torch.randn(4, requires_grad=True)
    loss = (x ** 3).sum()
    nodes, _ = walk([loss.grad_fn])
    expected = _expected(nodes, loss)
    got = NodeNormSampler().hooked_backward(nodes, lambda: loss.backward(create_graph=True))
    x.grad = None                                    # break the cycle create_graph made
    assert expected
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, rel=1e-5)


class View(torch.autograd.Function):
    """A custom Function named like a layout op that scales its gradient: never trusted."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return 3 * g


def _graph_with_shortcuts():
    torch.manual_seed(1)
    x = torch.randn(4, 6, requires_grad=True)
    w = torch.randn(6, 6, requires_grad=True)
    bias = torch.randn(6, requires_grad=True)
    h = (x @ w).view(2, 2, 6).transpose(0, 1).reshape(4, 6)      # layout chain
    h2 = torch.add(h.tanh(), h.sin(), alpha=2.0)                   # alpha scales one input
    h3 = h2 - h.exp() + bias                                       # sub; bias broadcasts
    h4 = View.apply(h3.sigmoid())
    return (h4.t().contiguous() * torch.linspace(0.1, 1, 4)).sum()


def test_hook_plan_gives_the_norms_of_hooking_every_node():
    loss = _graph_with_shortcuts()
    nodes, edges = walk([loss.grad_fn])
    skip = [hasattr(fn, "variable") for fn in nodes]
    expected = _expected(nodes, loss)
    plan = hook_plan(nodes, edges, skip)
    got = NodeNormSampler().hooked_backward(nodes, lambda: loss.backward(), skip, plan=plan)
    assert len(plan.hooks) < sum(not s for s in skip)              # fewer hooks than nodes
    assert len(plan.copies) >= 3                                   # norms passed on through views/adds
    for k, fn in enumerate(nodes):
        if skip[k]:
            assert np.isnan(got[k])
        else:
            assert got[k] == pytest.approx(expected[k], rel=1e-5), fn.name()


def test_hook_plan_copies_only_through_exact_passes():
    loss = _graph_with_shortcuts()
    nodes, edges = walk([loss.grad_fn])
    plan = hook_plan(nodes, edges, [hasattr(fn, "variable") for fn in nodes])
    consumers = {}
    for prod, cons, _ in edges:
        consumers.setdefault(prod, []).append(cons)
    for c in plan.copies.tolist():
        (through,) = consumers[nodes[c]]
        assert not hasattr(through, "_forward_cls")                  # not the custom "View"
        name = through.name()
        assert any(name.startswith(op) for op in ("View", "Transpose", "T", "Clone", "UnsafeView",
                                                  "Add", "Sub", "Reshape", "Permute")), name


def test_a_plan_stays_right_when_shapes_change_between_steps():
    """A plan is reused for every step of the same structure: a batch of one (x + y without
    broadcasting) must not teach it a shortcut that a batch of four (broadcasting) breaks."""
    torch.manual_seed(2)
    w = torch.randn(6, 6, requires_grad=True)
    y0 = torch.randn(1, 6, requires_grad=True)

    def loss_for(batch):
        x = torch.randn(batch, 6) @ w
        return ((x + (y0 * 2).tanh()).t().sin() ** 2).sum()

    first = loss_for(1)
    nodes, edges = walk([first.grad_fn])
    skip = [hasattr(fn, "variable") for fn in nodes]
    plan = hook_plan(nodes, edges, skip)
    first.backward()
    loss = loss_for(4)
    nodes, _ = walk([loss.grad_fn])
    expected = _expected(nodes, loss)
    got = NodeNormSampler().hooked_backward(nodes, lambda: loss.backward(), skip, plan=plan)
    checked = [k for k in expected if not skip[k]]
    assert len(checked) >= 6
    for k in checked:
        assert got[k] == pytest.approx(expected[k], rel=1e-5), nodes[k].name()
