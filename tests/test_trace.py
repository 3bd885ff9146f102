"""The trace: structure, names, shapes, modules, lines and gradients, with torch as the oracle."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.script.load import load_script
from gradviz.core.trace.tracer import trace_run
from tests.conftest import line_of
from tolerance import approx_of

SCRIPTS = Path(__file__).parent / "scripts"


def independent_walk(root) -> set:
    """Every node reachable from root through next_functions (recursion-free)."""
    seen, stack = set(), [root]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return seen


def torch_grads(script_path: Path, seed: int = 0, step: int = 0):
    """Plain torch: same seed, same batch, loss.backward(); returns (model, loss)."""
    script = load_script(script_path)
    torch.manual_seed(seed)
    model = script.new_model()
    inputs, targets = script.get_batch(step)
    loss = script.compute_loss(model, inputs, targets)
    loss.backward()
    return model, loss


def test_hand_checked_affine_gradients():
    g = gradviz.trace(SCRIPTS / "tiny_linear.py")
    assert g.nodes["param:w"]["grad_norm"] == pytest.approx(12.0)
    assert g.nodes["param:w"]["grad_mean"] == pytest.approx(12.0)
    assert g.nodes["param:b"]["grad_norm"] == pytest.approx(6.0)
    assert g.nodes["input:0"]["grad_mean"] == pytest.approx(18.0)
    assert g.nodes["loss"]["value"] == pytest.approx(0.0 + (2 * 3 + 1 - 4) ** 2)


def test_kinds_edges_and_lines_on_affine():
    path = SCRIPTS / "tiny_linear.py"
    g = gradviz.trace(path)
    kinds = nx.get_node_attributes(g, "kind")
    assert kinds["param:w"] == "param" and kinds["input:0"] == "input" and kinds["loss"] == "loss"
    assert g.nodes["param:w"]["param"] == "w"
    mul = next(n for n, a in g.nodes(data=True) if a["label"] == "mul")
    add = next(n for n, a in g.nodes(data=True) if a["label"] == "add")
    # data-flow direction: leaves feed mul, mul feeds add, everything ends in the loss
    assert g.has_edge("param:w", mul) and g.has_edge("input:0", mul) and g.has_edge(mul, add)
    assert g.has_edge("param:b", add)
    assert nx.is_directed_acyclic_graph(g)
    assert all(nx.has_path(g, n, "loss") for n in g)
    assert g.nodes[mul]["op"] == "MulBackward0"
    assert g.nodes[mul]["location"] == f"{path}:{line_of(path, 'LINE_AFFINE')}"
    assert "x * self.w" in g.nodes[mul]["code"]
    pow_node = next(n for n, a in g.nodes(data=True) if a["label"] == "pow")
    assert g.nodes[pow_node]["location"].endswith(f":{line_of(path, 'LINE_LOSS')}")
    assert g.edges[mul, add]["shape"] == [1]


def test_node_count_equals_independent_walk():
    run = trace_run(SCRIPTS / "nested.py")
    reachable = [n for n, a in run.graph.nodes(data=True) if a["reachable"] and a["kind"] != "loss"]
    assert len(reachable) == len(independent_walk(run.loss.grad_fn))


def test_param_grads_equal_torch_and_names_are_qualified():
    g = gradviz.trace(SCRIPTS / "nested.py")
    model, _ = torch_grads(SCRIPTS / "nested.py")
    for name, p in model.named_parameters():
        node = g.nodes[f"param:{name}"]
        assert node["kind"] == "param" and node["param"] == name
        assert node["shape"] == list(p.shape)
        assert node["grad_norm"] == pytest.approx(p.grad.norm().item(), rel=1e-5)
        size = p.grad.abs().max().item()
        assert node["grad_max"] == approx_of(p.grad.max().item(), size, 1e-5)
        assert node["grad_std"] == approx_of(p.grad.std(unbiased=False).item(), size, 1e-4)
        assert node["value_norm"] == pytest.approx(p.detach().norm().item(), rel=1e-5)
    assert "param:encoder.1.proj.weight" in g


def test_op_nodes_carry_module_shape_saved_and_custom_function():
    path = SCRIPTS / "nested.py"
    g = gradviz.trace(path)
    ops = {n: a for n, a in g.nodes(data=True) if a["kind"] == "op"}
    addmm = [a for a in ops.values() if a["op"] == "AddmmBackward0"]
    assert {a["module"] for a in addmm} == {"encoder.0.proj", "encoder.1.proj", "head"}
    head = next(a for a in addmm if a["module"] == "head")
    assert head["shape"] == [4, 3] and head["dtype"] == "float32" and head["module_type"] == "Linear"
    assert {s["name"] for s in head["saved"]} >= {"mat1", "mat2"}
    mat1 = next(s for s in head["saved"] if s["name"] == "mat1")
    assert mat1["shape"] == [4, 8]
    custom = [a for a in ops.values() if a["custom"]]
    assert len(custom) == 2 and all(a["custom"].endswith("Double") and a["label"] == "Double" for a in custom)
    assert all(a["module"].endswith("encoder.0") or a["module"].endswith("encoder.1") for a in custom)
    norm = [a for a in ops.values() if a["label"] == "native_layer_norm"]
    assert {a["module"] for a in norm} == {"encoder.0.norm", "encoder.1.norm"}
    assert all(a["location"].startswith(str(path)) for a in ops.values() if a["label"] == "view")


def test_op_gradient_equals_torch_retain_grad():
    """The gradient flowing through an op node is dL/d(output of that op)."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 2)
    x = torch.randn(5, 3)
    h = lin(x)
    act = torch.tanh(h)
    loss = (act ** 2).mean()
    dh, dact, dw = torch.autograd.grad(loss, [h, act, lin.weight], retain_graph=True)
    g = gradviz.trace(loss, model=lin)
    assert lin.weight.grad is None  # tensor mode leaves .grad untouched
    ids = {a["label"]: a for _, a in g.nodes(data=True) if a["kind"] == "op"}
    assert ids["addmm"]["grad_norm"] == pytest.approx(dh.norm().item(), rel=1e-5)
    assert ids["tanh"]["grad_norm"] == pytest.approx(dact.norm().item(), rel=1e-5)
    assert g.nodes["param:weight"]["grad_norm"] == pytest.approx(dw.norm().item(), rel=1e-5)


def test_several_roots_and_double_backward():
    x = torch.tensor([1.5, -2.0], requires_grad=True)
    y = (x ** 3).sum()
    (gx,) = torch.autograd.grad(y, x, create_graph=True)  # 3x^2, itself differentiable
    penalty = (gx ** 2).sum()
    g = gradviz.trace([y, penalty])
    assert g.graph["roots"] == ["loss0", "loss1"]
    assert {a["kind"] for _, a in g.nodes(data=True)} >= {"loss", "op", "leaf"}
    leaf = next(n for n, a in g.nodes(data=True) if a["kind"] == "leaf")
    # d/dx [x^3 + (3x^2)^2] = 3x^2 + 36x^3
    expected = 3 * x.detach() ** 2 + 36 * x.detach() ** 3
    assert g.nodes[leaf]["grad_norm"] == pytest.approx(expected.norm().item(), rel=1e-5)


def test_ids_are_deterministic_and_json_is_stable():
    a = gradviz.trace(SCRIPTS / "nested.py")
    b = gradviz.trace(SCRIPTS / "nested.py")
    assert list(a.nodes) == list(b.nodes) and list(a.edges) == list(b.edges)
    for n in a:
        assert a.nodes[n]["op"] == b.nodes[n]["op"] and a.nodes[n]["grad_norm"] == b.nodes[n]["grad_norm"]


def test_deep_graph_walk_is_not_recursive():
    x = torch.ones(2, requires_grad=True)
    y = x
    for _ in range(sys.getrecursionlimit() * 3):
        y = y * 1.0001
    g = gradviz.trace(y.sum())
    assert g.number_of_nodes() > sys.getrecursionlimit() * 3


def test_unused_and_frozen_params_are_isolated_nodes():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(2, 2)
            self.unused = nn.Linear(2, 2)
            self.frozen = nn.Linear(2, 2).requires_grad_(False)

        def forward(self, x):
            return self.frozen(self.used(x))

    net = Net()
    g = gradviz.trace(net(torch.ones(1, 2)).sum(), model=net)
    assert g.nodes["param:unused.weight"]["reachable"] is False
    assert g.nodes["param:unused.weight"]["grad_norm"] is None
    assert g.nodes["param:frozen.weight"]["requires_grad"] is False
    assert g.nodes["param:used.weight"]["reachable"] is True
    assert g.degree("param:unused.weight") == 0


def test_hooks_are_removed_even_when_backward_raises():
    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("boom in backward")

    x = torch.ones(3, requires_grad=True)
    mid = x * 2
    y = Boom.apply(mid).sum()
    with pytest.raises(gradviz.ScriptError) as info:
        gradviz.trace(y)
    assert info.value.code == "backward-error" and "boom in backward" in str(info.value)
    # no hook left behind: a fresh backward through the same nodes sees none of ours
    z = (mid * 3).sum()
    z.backward()
    assert mid.grad_fn._backward_pre_hooks == {} if hasattr(mid.grad_fn, "_backward_pre_hooks") else True
    assert torch.equal(x.grad, torch.full((3,), 6.0))


def test_trace_capture_of_user_forward_gives_modules():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    with gradviz.capture(net) as cap:
        loss = net(torch.randn(2, 3)).sum()
    g = gradviz.trace(loss, model=net, capture=cap)
    modules = {a["module"] for _, a in g.nodes(data=True) if a["kind"] == "op" and a["label"] in ("addmm", "relu")}
    assert modules == {"0", "1", "2"}
    assert all(a["location"].startswith(__file__) for _, a in g.nodes(data=True)
               if a["kind"] == "op" and a["label"] == "relu")


def test_nan_gradients_are_counted():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    y = torch.sqrt(x).sum()  # d sqrt(x)/dx at 0 is inf
    g = gradviz.trace(y)
    leaf = next(n for n, a in g.nodes(data=True) if a["kind"] == "leaf")
    assert g.nodes[leaf]["grad_inf"] == 1
    assert math.isinf(g.nodes[leaf]["grad_norm"])
    assert g.nodes[leaf]["grad_max"] == pytest.approx(0.5)


def test_modules_table_has_grad_norms():
    g = gradviz.trace(SCRIPTS / "nested.py")
    model, _ = torch_grads(SCRIPTS / "nested.py")
    table = g.graph["modules"]
    expect = torch.sqrt(sum(p.grad.norm() ** 2 for n, p in model.named_parameters() if n.startswith("encoder.0.")))
    assert table["encoder.0"]["grad_norm"] == pytest.approx(expect.item(), rel=1e-5)
    assert table["encoder.0"]["type"] == "Block" and table["encoder.0"]["parent"] == "encoder"
    assert table[""]["numel"] == sum(p.numel() for p in model.parameters())


def test_graph_attributes_are_json_serialisable_after_cleanup():
    g = gradviz.trace(SCRIPTS / "nested.py")
    data = nx.node_link_data(g, edges="edges")
    text = json.dumps(data, default=str)
    assert '"kind": "param"' in text and '"grad_norm"' in text


def test_module_norms_from_live_values_equal_a_fresh_module_table():
    """``ModuleNorms.compute(live)`` gives what ``module_table`` computes at trace time."""
    import math

    from gradviz.core.trace.modules import ModuleNorms, module_table

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 1))
    with gradviz.capture(model) as cap:                # module paths for the op nodes
        loss = model(torch.randn(5, 4)).pow(2).mean()
    graph = gradviz.trace(loss, model=model, capture=cap)
    index = ModuleNorms(graph.graph["modules"], graph)
    norms, derived = index.compute()
    for path, info in graph.graph["modules"].items():
        if info["numel"]:
            assert norms[path] == pytest.approx(info["grad_norm"], rel=1e-9), path
    assert {"1", "2.1"} <= derived                     # ReLU, Tanh: the largest norm through their ops
    doubled = {n: 2 * a["grad_norm"] for n, a in graph.nodes(data=True) if a.get("grad_norm") is not None}
    live, _ = index.compute(doubled)
    scaled = module_table(model, graph)
    for path, info in scaled.items():
        if info["numel"]:
            assert live[path] == pytest.approx(2 * info["grad_norm"], rel=1e-9), path
    traced = [a["grad_norm"] for _, a in graph.nodes(data=True) if a["kind"] == "param"]
    assert len(traced) == 6
    assert index.total(doubled) == pytest.approx(2 * math.sqrt(sum(v * v for v in traced)), rel=1e-9)
    nan = dict(doubled, **{"param:0.weight": float("nan")})
    assert math.isnan(index.compute(nan)[0]["0"]) and math.isnan(index.total(nan))


def test_sparse_gradient_stats_are_those_of_the_dense_gradient():
    from torch import nn

    import gradviz.core.trace.tracer as gtrace

    torch.manual_seed(0)
    emb, lin = nn.Embedding(20, 4, sparse=True), nn.Linear(4, 1)
    model = nn.Sequential(emb, lin)
    idx = torch.tensor([1, 2, 2, 7])
    g = gtrace.trace(model(idx).sum(), model)
    model(idx).sum().backward()
    dense = emb.weight.grad.to_dense()
    node = g.nodes["param:0.weight"]
    assert node["grad_norm"] == pytest.approx(dense.norm().item(), rel=1e-6)
    assert node["grad_zero_frac"] == pytest.approx((dense == 0).float().mean().item())


CHECKPOINTED = '''
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(2))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + checkpoint(block, {inner}, use_reentrant=True)
        with torch.no_grad():
            scale = x.abs().mean()          # a cut of the user's own: stays in the list
        return self.head(x) * 0 + self.head(x) / (1 + 0 * scale)


def model():
    return Model()


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g), torch.randn(4, 2, generator=g)


def loss_fn(out, y):
    return ((out - y) ** 2).mean()
'''


@pytest.mark.parametrize("meta", [False, True])
def test_reentrant_checkpointing_cuts_nothing(tmp_path, meta):
    """Its forward runs under no_grad and backward re-runs it with grad: every parameter is reached
    (as the diagnosis's reachability says), so the checkpoint's no_grad is not listed among the cuts;
    the user's own no_grad is."""
    path = tmp_path / "ckpt.py"
    path.write_text(CHECKPOINTED.replace("{inner}", "x"))
    g = gradviz.trace(path, meta=meta)
    params = {a["param"]: a["reachable"] for _, a in g.nodes(data=True) if a["kind"] == "param"}
    assert params and all(params.values())
    cuts = g.graph["cuts"]
    assert cuts and all(not c["checkpoint"] for c in cuts)
    assert {c["code"] for c in cuts} == {"with torch.no_grad():"}


def test_a_checkpoint_that_cuts_keeps_its_cut(tmp_path):
    """A checkpoint whose input needs no grad really cuts its block off: its no_grad stays listed."""
    path = tmp_path / "ckpt.py"
    path.write_text(CHECKPOINTED.replace("{inner}", "torch.ones_like(x)"))
    with pytest.warns(UserWarning):            # torch warns that no input requires grad
        g = gradviz.trace(path)
    unreached = {a["param"] for _, a in g.nodes(data=True) if a["kind"] == "param" and not a["reachable"]}
    assert unreached == {f"blocks.{i}.0.{w}" for i in range(2) for w in ("weight", "bias")}
    assert any(c["checkpoint"] for c in g.graph["cuts"])
