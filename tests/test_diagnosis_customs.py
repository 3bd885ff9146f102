"""User autograd.Functions are found without patching ``Function.apply`` (torch 2.14 made it a C
``classmethod_descriptor``): from the torch calls their ``forward`` makes, on every torch."""
from __future__ import annotations

import inspect

import torch

from gradviz.core.diagnosis.customs import CustomCallRecorder, unrecorded_functions
from gradviz.core.diagnosis.numeric import check_custom_call
from gradviz.core.diagnosis.diagnostic_capture import DiagnosticCapture
from gradviz.core.trace.walk import walk


class CtxCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale=1.0):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return scale * x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * ctx.scale * g * x * x, None          # wrong on purpose: 2 instead of 3


class SetupScale(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class Identity(torch.autograd.Function):
    """A forward with no torch call: nothing to see from a mode."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_non_differentiable()
        return x.view_as(x) if False else x

    @staticmethod
    def backward(ctx, g):
        return g


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        h = CtxCube.apply(self.lin(x), 0.5)
        return SetupScale.apply(h, 3.0)


def test_functions_found_without_touching_apply():
    before = torch.autograd.Function.__dict__["apply"]
    model = Net()
    x = torch.randn(2, 3)
    with DiagnosticCapture(model) as cap:
        assert torch.autograd.Function.__dict__["apply"] is before
        y = model(x)
    assert torch.autograd.Function.__dict__["apply"] is before
    nodes, _ = walk([y.sum().grad_fn])
    cap.customs.match_nodes(nodes)
    calls = {c.cls: c for c in cap.custom_calls}
    assert set(calls) == {CtxCube, SetupScale}
    cube, scale = calls[CtxCube], calls[SetupScale]
    # the node of each call is the graph's node for it (ctx style: ctx is the node itself)
    assert cube.node is y.grad_fn.next_functions[0][0]
    assert scale.node is y.grad_fn
    # inputs as forward saw them: a copy of the Linear output, the non-tensor argument kept
    assert cube.args[1] == 0.5 and scale.args[1] == 3.0
    assert torch.equal(cube.args[0], model.lin(x).detach())
    # the location is the line that calls apply, not a line inside forward
    line = next(i for i, text in enumerate(open(__file__), 1) if "h = CtxCube.apply(" in text)
    assert cube.location == f"{__file__}:{line}" and "CtxCube.apply" in cube.code
    assert unrecorded_functions(nodes, cap.custom_calls) == []


def test_recorder_and_check_blame_the_wrong_backward():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    with CustomCallRecorder() as rec:
        CtxCube.apply(x, 2.0).sum()
    assert [c.cls for c in rec.calls] == [CtxCube]
    results = check_custom_call(rec.calls[0])
    assert results and not results[0].passed
    # blamed on the backward's own lines
    assert results[0].location == f"{__file__}:{inspect.getsourcelines(CtxCube.backward)[1]}"


def test_function_without_torch_calls_is_named_as_unrecorded():
    x = torch.randn(3, requires_grad=True)
    with CustomCallRecorder() as rec:
        y = Identity.apply(x * 1)
    nodes, _ = walk([y.grad_fn])
    assert rec.calls == []
    assert unrecorded_functions(nodes, rec.calls) == [f"{__name__}.Identity"]
