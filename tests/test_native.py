"""The native accelerator (gradviz.core.native) gives the numbers of the Python paths and of torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from gradviz.core import native
from gradviz.core.trace.nodenorms import NodeNormSampler
from gradviz.core.script.load import load_script
from gradviz.core.stats.steps import StepStats
from gradviz.core.trace.walk import walk
from conftest import ROOT, SAMPLES
from tolerance import assert_close_to_magnitude

MISSING = -1.0


def _python_norms(loss: torch.Tensor, params: list[torch.Tensor]) -> np.ndarray:
    """Every node's norm by the Python path (a prehook on every node but the parameters)."""
    nodes, _ = walk([loss.grad_fn])
    ids = {id(p) for p in params}
    skip = [hasattr(fn, "variable") and id(fn.variable) in ids for fn in nodes]
    sampler = NodeNormSampler(named_parameters=[(str(i), p) for i, p in enumerate(params)])
    return sampler.hooked_backward(nodes, loss.backward, skip, missing=MISSING)


def _native_norms(nm, loss: torch.Tensor, backward=None) -> np.ndarray:
    key, n, armed = nm.begin(loss, False)
    assert not armed and n == len(walk([loss.grad_fn])[0])
    nm.arm()
    (backward or loss.backward)()
    return nm.finish(MISSING)


def _sample(name: str):
    script = load_script(SAMPLES / name)
    torch.manual_seed(0)
    model = script.new_model()
    inputs, targets = script.get_batch(0)

    def loss():
        return script.module.loss_fn(model(*inputs), targets)

    return model, loss


@pytest.mark.parametrize("sample", ["mlp_digits.py", "cnn.py", "transformer.py"])
def test_node_norms_equal_the_python_path_on_the_samples(native_module, sample):
    model, make_loss = _sample(sample)
    params = list(model.parameters())
    loss = make_loss()
    nm = native_module.NodeNorms(params)
    nm.begin(loss, False)
    assert nm.names() == [fn.name() for fn in walk([loss.grad_fn])[0]]     # the same walk order
    nm.cancel()
    got = _native_norms(nm, loss)
    model.zero_grad(set_to_none=True)
    expect = _python_norms(make_loss(), params)
    assert got.shape == expect.shape
    np.testing.assert_array_equal(got == MISSING, expect == MISSING)
    assert_close_to_magnitude(np.where(expect == MISSING, 0, got), np.where(expect == MISSING, 0, expect), 2e-5)


def test_node_norms_equal_torch(native_module):
    """Against autograd itself: a node's value is the norm of the gradient of the tensor it made."""
    torch.manual_seed(0)
    lin1, lin2 = nn.Linear(5, 7), nn.Linear(7, 3)
    x = torch.randn(4, 5, requires_grad=True)
    h = lin1(x)
    a = torch.sigmoid(h).t()                       # a transposed (strided) gradient flows into t()
    first, second = a.split([3, 4])                # a node with two outputs
    z = lin2(torch.cat([second, first]).t())
    loss = (z ** 2).mean()
    for t in (h, a, first, second, z):
        t.retain_grad()
    params = [*lin1.parameters(), *lin2.parameters()]
    nodes, _ = walk([loss.grad_fn])
    nm = native_module.NodeNorms(params)
    got = _native_norms(nm, loss, lambda: loss.backward())
    at = {fn: k for k, fn in enumerate(nodes)}
    for t in (h, a, z):
        assert got[at[t.grad_fn]] == pytest.approx(t.grad.norm().item(), rel=1e-5)
    split_norm = torch.sqrt(first.grad.norm() ** 2 + second.grad.norm() ** 2).item()
    assert got[at[first.grad_fn]] == pytest.approx(split_norm, rel=1e-5)
    assert got[at[loss.grad_fn]] == pytest.approx(1.0)
    leaf = at[x.grad_fn] if x.grad_fn is not None else None
    assert leaf is None                            # an input leaf has no grad_fn of its own...
    acc = [k for k, fn in enumerate(nodes) if hasattr(fn, "variable") and fn.variable is x]
    assert got[acc[0]] == pytest.approx(x.grad.norm().item(), rel=1e-5)   # ...its AccumulateGrad is measured
    params_at = [k for k, fn in enumerate(nodes) if hasattr(fn, "variable") and fn.variable is not x]
    assert all(got[k] == MISSING for k in params_at)                        # parameters: from p.grad


def test_bf16_gradients_take_the_device_path(native_module):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)).to(torch.bfloat16)
    x = torch.randn(5, 6, dtype=torch.bfloat16)
    params = list(model.parameters())
    got = _native_norms(native_module.NodeNorms(params), model(x).float().pow(2).sum())
    model.zero_grad(set_to_none=True)
    expect = _python_norms(model(x).float().pow(2).sum(), params)
    np.testing.assert_allclose(got, expect, rtol=1e-3)


def test_custom_function_and_nodes_that_never_ran(native_module):
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Stop(torch.autograd.Function):             # its input gets no gradient
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return None

    w = nn.Parameter(torch.randn(3))
    x = torch.randn(3, requires_grad=True)
    loss = (Double.apply(w * x) + Stop.apply(torch.exp(x))).sum()
    nodes, _ = walk([loss.grad_fn])
    got = _native_norms(native_module.NodeNorms([w]), loss)
    names = [fn.name() for fn in nodes]
    assert "DoubleBackward" in names and "StopBackward" in names
    assert got[names.index("DoubleBackward")] == pytest.approx(3 ** 0.5)
    assert got[names.index("ExpBackward0")] == MISSING          # Stop returned None: it never ran


def test_structure_key(native_module):
    model, make_loss = _sample("mlp_digits.py")
    params = list(model.parameters())
    nm = native_module.NodeNorms(params)
    key1 = nm.begin(make_loss(), False)[0]
    nm.cancel()
    assert nm.begin(make_loss(), False)[0] == key1            # same structure, new graph
    nm.cancel()
    script = load_script(SAMPLES / "mlp_digits.py")
    (images,), targets = script.get_batch(1)
    small = nm.begin(script.module.loss_fn(model(images[:7]), targets[:7]), False)[0]
    assert small == key1                                       # shapes are not structure
    other = nm.begin(script.module.loss_fn(model(images) * 2, targets), False)[0]
    nm.cancel()
    assert other != key1
    # the same graph over other parameters (a copy of the model) is another structure
    twin = native_module.NodeNorms(list(load_script(SAMPLES / "mlp_digits.py").new_model().parameters()))
    assert twin.begin(make_loss(), False)[0] != key1
    twin.cancel()
    # learned keys are armed by begin()
    nm.learn(key1)
    loss = make_loss()
    key, n, armed = nm.begin(loss)
    assert key == key1 and armed
    loss.backward()
    assert (nm.finish(MISSING) > 0).sum() >= 8


def test_hooks_go_inert_and_errors_propagate(native_module):
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)
    x = torch.randn(2, 4)
    loss = torch.tanh(lin(x)).sum()
    nm = native_module.NodeNorms(list(lin.parameters()))
    first = _native_norms(nm, loss, lambda: loss.backward(retain_graph=True))
    loss.backward(retain_graph=True)                # the first hooks are still on the nodes, inert
    second = _native_norms(nm, loss, lambda: loss.backward())
    np.testing.assert_allclose(first, second, rtol=1e-6)

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("boom in backward")

    bad = Boom.apply(lin(x)).sum()
    nm.begin(bad, False)
    nm.arm()
    with pytest.raises(RuntimeError, match="boom"):
        bad.backward()
    values = nm.finish(MISSING)
    assert values[0] == pytest.approx(1.0)          # the root ran before the error


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grad_norms_equal_torch(native_module, dtype):
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(50, 40, dtype=dtype)), nn.Parameter(torch.randn(7, dtype=dtype)),
              nn.Parameter(torch.randn(3, 5, dtype=dtype))]
    params[0].grad = torch.randn(50, 40, dtype=dtype) * 1e3
    params[1].grad = torch.randn(7, dtype=dtype)
    params[2].grad = torch.randn(5, 3, dtype=dtype).t()             # a transposed gradient
    sq = native_module.GradNorms(params).sq()
    expect = [p.grad.double().pow(2).sum().item() for p in params]
    np.testing.assert_allclose(sq, expect, rtol=1e-6)
    params[1].grad = None
    assert native_module.GradNorms(params).sq() is None              # the caller's general path
    params[1].grad = torch.randn(7, dtype=dtype)[::2].repeat(2)[:7]  # a fresh dense copy is fine
    assert native_module.GradNorms(params).sq() is not None


def test_a_large_float32_gradient_keeps_its_precision(native_module):
    p = nn.Parameter(torch.zeros(3_000_000))
    p.grad = torch.full((3_000_000,), 0.1) + torch.randn(3_000_000) * 1e-3
    (sq,) = native_module.GradNorms([p]).sq()
    assert sq == pytest.approx(p.grad.double().pow(2).sum().item(), rel=1e-6)


def test_step_stats_rows_equal_the_python_path(native_module):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(10, 6), torch.randint(3, (10,))
    nn.functional.cross_entropy(model(x), y).backward()
    rows = []
    for module in (None, native_module):
        with native.forced(module):
            stats = StepStats(model.named_parameters(), track_updates=False)
        assert stats.strategy == ("host" if module is None else "native")
        stats.begin()
        stats.grads_ready(updates=False)
        rows.append(stats.finish(1.0, lr=0.1))
    np.testing.assert_allclose(rows[0].param_norms, rows[1].param_norms, rtol=1e-6)
    assert rows[0].grad_norm == pytest.approx(rows[1].grad_norm, rel=1e-6)
    expect = [p.grad.norm().item() for p in model.parameters()]
    np.testing.assert_allclose(rows[1].param_norms, expect, rtol=1e-5)


def test_nothing_compiles_unless_asked(tmp_path, monkeypatch):
    """Opt-in: the default mode loads a built copy but never compiles; ``build`` compiles in
    the foreground, ``background`` starts one build in another process."""
    monkeypatch.setenv("GRADVIZ_CACHE", str(tmp_path))          # an empty cache: nothing built
    spawned, built = [], []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, **kw: spawned.append(cmd))
    monkeypatch.setattr(native, "compiler_available", lambda: True)
    monkeypatch.setattr(native, "build", lambda verbose=False: built.append(1))
    saved = dict(native._state)
    try:
        for mode in ("auto", "0", None):
            native._state.clear()
            if mode is None:
                monkeypatch.delenv("GRADVIZ_NATIVE", raising=False)
            else:
                monkeypatch.setenv("GRADVIZ_NATIVE", mode)
            assert native.get() is None and not spawned and not built, mode
        assert list(tmp_path.iterdir()) == []                        # not even a folder
        native._state.clear()
        monkeypatch.setenv("GRADVIZ_NATIVE", "build")
        native.get()
        assert built == [1] and not spawned
        native._state.clear()
        monkeypatch.setenv("GRADVIZ_NATIVE", "background")
        assert native.get() is None                                  # a background build...
        assert len(spawned) == 1 and "--build" in spawned[0]
        lock = native.cache_dir() / "building.lock"
        assert lock.exists()
        native._state.clear()
        assert native.get() is None and len(spawned) == 1            # ...at most one at a time
        assert native.status()["built"] is False
        # a module whose build has not finished (no "ready" mark) is never loaded
        (native.cache_dir() / f"{native._name()}.so").write_bytes(b"half a linker's output")
        assert native.status()["built"] is False and native.get() is None
    finally:
        native._state.clear()
        native._state.update(saved)


def test_watch_and_trainer_compile_nothing_by_default(tmp_path):
    """A fresh process with an empty cache and no setting: watch() and the trainer run on the
    Python paths and leave the cache empty (no compiler started)."""
    cache = tmp_path / "cache"
    code = ("import sys, torch, gradviz\n"
            "from gradviz.core import native\n"
            "m = torch.nn.Linear(3, 2)\n"
            "with gradviz.watch(m, sys.argv[1], every=1) as w:\n"
            "    for _ in range(3):\n"
            "        m(torch.randn(4, 3)).sum().backward(); w.step(1.0)\n"
            "from gradviz.core.train.trainer import Trainer, TrainConfig\n"
            "Trainer(sys.argv[2], TrainConfig(device='cpu')).step()\n"
            "print(native.get() is None, native.status()['built'])\n")
    env = {k: v for k, v in os.environ.items() if k != "GRADVIZ_NATIVE"}
    env.update(GRADVIZ_CACHE=str(cache), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.gvrun"), str(SAMPLES / "mlp_digits.py")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
    assert not cache.exists() or not any(cache.rglob("*"))


def test_cache_key_is_torch_and_abi_not_the_interpreter_path(monkeypatch):
    saved = dict(native._state)
    try:
        native._state.pop("key", None)
        key = native._key()
        native._state.pop("key", None)
        monkeypatch.setattr(sys, "executable", "/elsewhere/venv/bin/python")
        assert native._key() == key                                   # another venv, same torch: same build
        native._state.pop("key", None)
        monkeypatch.setattr(torch, "__version__", torch.__version__ + ".post1")
        assert native._key() != key                                   # another torch: a fresh build
    finally:
        native._state.clear()
        native._state.update(saved)


def test_cli_native_status():
    out = subprocess.run([sys.executable, "-m", "gradviz", "native", "status", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert {"mode", "built", "loaded", "path", "compiler"} <= info.keys()


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")
def test_create_graph_backward(native_module):
    """A backward that builds a graph of its own (a gradient penalty): the hooks read the
    gradients and hand them on untouched."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
    x = torch.randn(3, 4)
    params = list(model.parameters())
    loss = model(x).pow(2).sum()
    got = _native_norms(native_module.NodeNorms(params), loss, lambda: loss.backward(create_graph=True))
    penalty = sum(p.grad.pow(2).sum() for p in params)
    assert penalty.requires_grad                    # second-order graph intact
    first = [p.grad.detach().clone() for p in params]
    model.zero_grad(set_to_none=True)
    loss2 = model(x).pow(2).sum()
    expect = _python_norms(loss2, params)
    np.testing.assert_allclose(got, expect, rtol=1e-5)
    for p, g in zip(params, first):
        torch.testing.assert_close(p.grad, g)
        p.grad = None                                # (breaks the parameter <-> gradient cycle)
