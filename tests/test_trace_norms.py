"""The trace's fast paths compute what torch computes, to the bit: gradient norms (``core/trace/grad_fill.py``),
module paths (``core/trace/capture.py``) and leaf detection (``core/trace/walk.py``)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_flatten

import gradviz
from gradviz.core.stats import tensors as gstats
from gradviz.core.trace.capture import _func_info, _func_name, _leaves
from gradviz.core.trace.grad_fill import Norms
from gradviz.core.trace.tracer import trace_run
from gradviz.core.trace.walk import is_leaf, walk


def _norms_of(tensors: dict[str, torch.Tensor | None]) -> dict[str, tuple]:
    graph_nodes = {nid: {} for nid in tensors}
    norms = Norms()
    for nid, t in tensors.items():
        norms.add_one(nid, "grad", t)

    class G:                      # Norms.fill only reads graph.nodes[nid]
        nodes = graph_nodes
    norms.fill(G)
    return {nid: (a.get("grad_norm"), a.get("grad_numel"), a.get("grad_nan"), a.get("grad_inf"))
            for nid, a in graph_nodes.items()}


def _reference(t: torch.Tensor) -> float | None:
    """What the trace computed before the short path: ``stats.norm_tensor`` (float64 accumulation)."""
    norm = gstats.norm_tensor([t])
    return None if norm is None else norm.item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_short_path_norms_equal_norm_tensor_bit_for_bit(dtype):
    torch.manual_seed(0)
    tensors = {
        "matrix": torch.randn(37, 19, dtype=torch.float32).to(dtype) * 1e3,
        "scalar": torch.tensor(-2.5, dtype=dtype),
        "empty": torch.empty(0, 5, dtype=dtype),
        "transposed": torch.randn(8, 16).to(dtype).t(),
        "broadcast": torch.randn(1, 7).to(dtype).expand(5, 7),
        "tiny": torch.full((3,), 1e-30).to(dtype),
        "needs grad": torch.randn(4, 4, dtype=torch.float32).to(dtype).requires_grad_(),
        "parameter": nn.Parameter(torch.randn(6, 3).to(dtype)),
    }
    got = _norms_of(tensors)
    for nid, t in tensors.items():
        expect = _reference(t)
        assert got[nid][0] == expect, nid                       # the same float, not approximately
        assert got[nid][0] == torch.linalg.vector_norm(t.detach(), dtype=torch.float64).item()
        assert got[nid][1] == t.numel() and got[nid][2] == 0 and got[nid][3] == 0
    assert got["empty"][0] == 0.0


def test_long_path_tensors_still_take_norm_tensor(monkeypatch):
    torch.manual_seed(1)
    dense = torch.randn(10, 4)
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2, 2]]), torch.tensor([1.0, 2.0, 3.0]), (5,))
    cplx = torch.randn(6, dtype=torch.complex64)
    monkeypatch.setattr(gstats, "CHUNK", 16)        # a "huge" tensor: reduced chunk by chunk
    got = _norms_of({"sparse": sparse, "complex": cplx, "chunked": dense, "none": None})
    assert got["sparse"][0] == _reference(sparse) == pytest.approx(math.sqrt(1 + 25))
    assert got["complex"][0] == _reference(cplx)
    assert got["chunked"][0] == _reference(dense) == pytest.approx(dense.double().norm().item())
    assert got["none"] == (None, None, None, None)     # no gradient: nothing written


def test_nonfinite_norms_leave_nan_and_inf_counts_unknown():
    got = _norms_of({"nan": torch.tensor([1.0, float("nan")]), "inf": torch.tensor([float("inf"), 0.0]),
                     "fine": torch.tensor([3.0, 4.0])})
    assert math.isnan(got["nan"][0]) and got["nan"][2:] == (None, None)
    assert got["inf"][0] == math.inf and got["inf"][2:] == (None, None)
    assert got["fine"] == (5.0, 2, 0, 0)


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.lin = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, idx):
        h = self.emb(idx)
        q, k = self.lin(h).chunk(2, dim=-1)              # one node, two outputs
        a = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return self.head(self.norm(h + (a @ k).repeat(1, 1, 2)))


def test_every_node_norm_is_torchs_float64_norm_of_its_gradient():
    torch.manual_seed(0)
    model = _Net().to(torch.float64)
    idx = torch.randint(11, (2, 5))
    with gradviz.capture(model) as cap:
        loss = model(idx).pow(2).mean()
    run = trace_run(loss, model, capture=cap, details="norms")     # tensor mode: the graph is kept for us
    seen: dict[str, list] = {}
    handles = [fn.register_prehook(lambda g, nid=nid: seen.__setitem__(nid, list(g)))
               for fn, nid in run.node_ids.items() if not is_leaf(fn)]
    loss.backward()
    for h in handles:
        h.remove()
    ops = [nid for nid, a in run.graph.nodes(data=True) if a["kind"] == "op"]
    assert ops and set(ops) == set(seen)
    for nid in ops:
        grads = [g for g in seen[nid] if g is not None]
        expect = gstats.norm_tensor(grads).item()
        assert run.graph.nodes[nid]["grad_norm"] == expect, nid
        assert run.graph.nodes[nid]["grad_numel"] == sum(g.numel() for g in grads)
    for name, p in model.named_parameters():
        attrs = run.graph.nodes[f"param:{name}"]
        assert attrs["grad_norm"] == torch.linalg.vector_norm(p.grad, dtype=torch.float64).item()
        assert attrs["value_norm"] == torch.linalg.vector_norm(p.detach(), dtype=torch.float64).item()
    assert {run.graph.nodes[n]["module"] for n in ops} == {"", "emb", "lin", "norm", "head"}


def test_leaves_are_tree_flatten_leaves():
    t = torch.ones(2)
    for obj in [t, (t, 3), [t, None, "x", 1.5], (t, (t, 2)), {"a": t}, (), [t, [t]], None, 7]:
        assert [id(x) for x in _leaves(obj)] == [id(x) for x in tree_flatten(obj)[0]]


def test_func_info_is_remembered_per_function():
    for func in (torch.Tensor.detach, torch.Tensor.detach_, torch.add, torch.Tensor.shape.__get__,
                 torch.Tensor.argmax):
        name, cut, drops = _func_info(func)
        assert name == _func_name(func)
        assert _func_info(func) == (name, cut, drops)
    assert _func_info(torch.Tensor.detach_)[1:] == (True, True)
    assert _func_info(torch.add)[1:] == (False, False)


def test_a_custom_functions_ctx_variable_does_not_make_a_leaf():
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.variable = "not a leaf"
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.ones(3, requires_grad=True)
    y = Keep.apply(x).sum()
    nodes, _ = walk([y.grad_fn])
    assert [is_leaf(fn) for fn in nodes] == [False, False, True]
    g = gradviz.trace(y)
    assert sorted(a["kind"] for _, a in g.nodes(data=True)) == ["leaf", "loss", "op", "op"]
    assert g.nodes[next(n for n, a in g.nodes(data=True) if a["kind"] == "leaf")]["grad_mean"] == 2.0
