"""The sample model scripts: each healthy one trains, each bug script shows its bug.

Scripts are loaded the way gradviz loads them: as their own module, from their file,
with their folder on ``sys.path``. The symptoms are checked with plain torch, so these
tests do not depend on gradviz's diagnosis code.
"""
from __future__ import annotations

import gzip
import importlib.util
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BUGS = SAMPLES / "bugs"

HEALTHY = ["mlp_digits", "transformer", "cnn"]
BUG_SCRIPTS = [
    "detach", "numpy_roundtrip", "no_grad", "argmax", "unused_submodule", "item_loss",
    "vector_loss", "inplace", "softmax_log", "dead_relu", "sigmoid_init", "deep_sigmoid",
    "exploding", "bad_backward", "frozen",
]
SCRIPT_ERRORS = ["syntax_error", "import_error", "missing_batch"]
FINDING = {
    "detach": "unreachable", "numpy_roundtrip": "unreachable", "no_grad": "unreachable",
    "argmax": "unreachable", "unused_submodule": "unreachable",
    "item_loss": "loss-not-tensor", "vector_loss": "loss-not-scalar", "inplace": "inplace",
    "softmax_log": "inf", "dead_relu": "dead-relu", "sigmoid_init": "saturated-sigmoid",
    "deep_sigmoid": "vanishing", "exploding": "exploding",
    "bad_backward": "gradcheck-mismatch", "frozen": "frozen",
    "syntax_error": "script-error", "import_error": "script-error",
    "missing_batch": "script-error",
}


def load_script(path: Path):
    """Execute ``path`` as its own module with its folder on sys.path (as gradviz does)."""
    folder = str(path.parent)
    spec = importlib.util.spec_from_file_location(f"_sample_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def build(module, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = module.model
    net = m if isinstance(m, nn.Module) else m()
    assert isinstance(net, nn.Module)
    return net


def as_tuple(inputs):
    return inputs if isinstance(inputs, tuple) else (inputs,)


def forward_loss(module, net, step: int = 0):
    inputs, targets = module.batch(step)
    if hasattr(module, "compute_loss"):
        return module.compute_loss(net, as_tuple(inputs), targets)
    return module.loss_fn(net(*as_tuple(inputs)), targets)


def sample(name: str):
    return load_script(SAMPLES / f"{name}.py")


def bug(name: str):
    return load_script(BUGS / f"{name}.py")


def grads(net: nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: p.grad for n, p in net.named_parameters()}


def assert_unreachable(net: nn.Module, cut_prefix: str):
    g = grads(net)
    cut = [n for n in g if n.startswith(cut_prefix + ".")]
    rest = [n for n in g if not n.startswith(cut_prefix + ".")]
    assert cut and rest
    assert all(g[n] is None for n in cut), f"{cut_prefix} should get no gradient"
    assert all(g[n] is not None and torch.isfinite(g[n]).all() for n in rest)


# ---------------------------------------------------------------------------
# healthy samples


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_sample_gives_finite_scalar_loss_and_all_grads(name):
    mod = sample(name)
    net = build(mod)
    loss = forward_loss(mod, net)
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0
    assert torch.isfinite(loss)
    loss.backward()
    for n, p in net.named_parameters():
        assert p.requires_grad, n
        assert p.grad is not None, f"{name}: {n} got no gradient"
        assert torch.isfinite(p.grad).all(), n
    assert any(float(p.grad.abs().sum()) > 0 for p in net.parameters())


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_sample_is_deterministic(name):
    mod = sample(name)
    x0, y0 = mod.batch(3)
    x1, y1 = mod.batch(3)
    assert torch.equal(x0, x1) and torch.equal(y0, y1)
    assert not torch.equal(mod.batch(4)[0], x0)
    a, b = build(mod, seed=1), build(mod, seed=1)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert callable(mod.model) and not isinstance(mod.model, nn.Module)  # re-creatable


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_sample_metrics_and_optimizer(name):
    mod = sample(name)
    net = build(mod)
    opt = mod.optimizer(net.parameters())
    assert isinstance(opt, torch.optim.Optimizer)
    net.train()
    result = mod.metrics(net)
    assert set(result) == {"accuracy"}
    assert isinstance(result["accuracy"], float) and 0.0 <= result["accuracy"] <= 1.0
    assert net.training  # metrics restores the mode


def test_mlp_digits_reaches_90_percent():
    """300 steps (time to 90 % is measured in benchmarks/bench_training.py, not here)."""
    mod = sample("mlp_digits")
    net = build(mod)
    opt = mod.optimizer(net.parameters())
    for step in range(300):
        inputs, targets = mod.batch(step)
        loss = mod.loss_fn(net(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    acc = mod.metrics(net)["accuracy"]
    assert acc >= 0.90, acc


def test_mlp_digits_architecture():
    net = build(sample("mlp_digits"))
    names = [n for n, _ in net.named_children()]
    assert names == ["fc1", "act1", "fc2", "act2", "fc3"]
    assert (net.fc1.in_features, net.fc1.out_features) == (64, 128)
    assert (net.fc2.out_features, net.fc3.out_features) == (64, 10)
    assert isinstance(net.act1, nn.ReLU) and isinstance(net.act2, nn.Sigmoid)
    x, y = sample("mlp_digits").batch(0)
    assert x.shape == (64, 64) and y.shape == (64,) and y.dtype == torch.int64
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0


def test_cnn_has_resnet_structure():
    net = build(sample("cnn"))
    assert any(isinstance(m, nn.BatchNorm2d) for m in net.modules())
    assert isinstance(net.stage2.shortcut, nn.Sequential)  # downsampling shortcut
    x, _ = sample("cnn").batch(0)
    assert x.shape == (64, 1, 8, 8)


# ---------------------------------------------------------------------------
# transformer


def count_autograd_nodes(loss: torch.Tensor) -> int:
    seen, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return len(seen)


def test_transformer_module_names_and_defaults():
    mod = sample("transformer")
    assert (mod.N_BLOCKS, mod.D_MODEL, mod.N_HEADS, mod.SEQ_LEN, mod.VOCAB, mod.BATCH) == (
        4, 64, 4, 32, 64, 8)
    net = build(mod)
    names = dict(net.named_modules())
    for n in ("blocks.3.attn.q_proj", "blocks.3.attn.k_proj", "blocks.3.attn.v_proj",
              "blocks.3.attn.out_proj", "blocks.0.ln1", "blocks.0.mlp.fc", "ln_f", "lm_head"):
        assert n in names, n
    assert not any(isinstance(m, nn.MultiheadAttention) for m in net.modules())
    x, y = mod.batch(0)
    assert x.shape == (8, 32) and net(x).shape == (8, 32, 64)


def test_transformer_env_overrides(monkeypatch):
    monkeypatch.setenv("GRADVIZ_GPT_BLOCKS", "2")
    monkeypatch.setenv("GRADVIZ_GPT_DMODEL", "32")
    mod = sample("transformer")
    assert mod.N_BLOCKS == 2 and mod.D_MODEL == 32
    net = build(mod)
    assert len(net.blocks) == 2 and net.tok_emb.embedding_dim == 32


def test_transformer_graph_size_per_block():
    mod = sample("transformer")
    x, y = mod.batch(0)
    counts = {}
    for n in (1, 2, 12):
        torch.manual_seed(0)
        net = mod.make_gpt(n)
        counts[n] = count_autograd_nodes(mod.loss_fn(net(x), y))
    per_block = counts[2] - counts[1]
    assert 50 <= per_block <= 65, per_block          # about 55 on torch 2.x
    assert counts[12] - counts[2] == 10 * per_block  # linear in depth


def test_transformer_learns_copy_task():
    mod = sample("transformer")
    torch.manual_seed(0)
    net = mod.make_gpt(2)
    opt = mod.optimizer(net.parameters())
    for step in range(200):
        inputs, targets = mod.batch(step)
        loss = mod.loss_fn(net(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert mod.metrics(net)["accuracy"] > 0.5


# ---------------------------------------------------------------------------
# digits data and the IDX reader


def test_digits_npz_and_split():
    with np.load(SAMPLES / "data" / "digits.npz") as f:
        images, labels = f["images"], f["labels"]
    assert images.shape == (1797, 8, 8) and images.dtype == np.uint8
    assert labels.shape == (1797,) and labels.dtype == np.uint8
    assert images.max() == 16 and set(np.unique(labels)) == set(range(10))
    assert (SAMPLES / "data" / "DIGITS_LICENSE.md").is_file()
    d = sample("mlp_digits")._digits.load_uci_digits()
    assert len(d.train_y) + len(d.test_y) == 1797 and len(d.test_y) == 299
    assert float(d.train_x.max()) == 1.0


def test_samples_do_not_import_sklearn():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import _digits, mlp_digits, cnn; "
            "_digits.load(); print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(SAMPLES)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "GRADVIZ_MNIST": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def write_idx(path: Path, array: np.ndarray, code: int, compress: bool = False) -> None:
    dtype = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    raw = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    raw += np.ascontiguousarray(array, dtype=dtype).tobytes()
    if compress:
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_reader_roundtrip(tmp_path, compress):
    _digits = sample("mlp_digits")._digits
    images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
    p = tmp_path / ("imgs.idx3-ubyte" + (".gz" if compress else ""))
    write_idx(p, images, 0x08, compress)
    out = _digits.read_idx(p)
    assert out.dtype == np.uint8 and out.shape == (3, 4, 5)
    assert np.array_equal(out, images)
    for code, arr in [(0x0C, np.array([[1, -2], [300000, 4]], dtype=np.int32)),
                      (0x0D, np.array([1.5, -2.25], dtype=np.float32)),
                      (0x0B, np.array([-7, 7, 1000], dtype=np.int16))]:
        q = tmp_path / f"x{code}.idx"
        write_idx(q, arr, code)
        got = _digits.read_idx(q)
        assert np.array_equal(got, arr) and got.dtype.isnative


def test_idx_reader_rejects_garbage(tmp_path):
    _digits = sample("mlp_digits")._digits
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError):
        _digits.read_idx(bad)
    short = tmp_path / "short.idx"
    short.write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"\x00" * 3)
    with pytest.raises(ValueError):
        _digits.read_idx(short)


def test_mnist_env_switches_mlp_to_784_inputs(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for split, n, gz in (("train", 40, True), ("t10k", 12, False)):
        ext = ".gz" if gz else ""
        write_idx(tmp_path / f"{split}-images-idx3-ubyte{ext}",
                  rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), 0x08, gz)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte{ext}",
                  rng.integers(0, 10, n, dtype=np.uint8), 0x08, gz)
    monkeypatch.setenv("GRADVIZ_MNIST", str(tmp_path))
    mod = sample("mlp_digits")
    net = build(mod)
    assert net.fc1.in_features == 784
    x, y = mod.batch(0)
    assert x.shape == (64, 784) and 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    forward_loss(mod, net).backward()
    assert 0.0 <= mod.metrics(net)["accuracy"] <= 1.0
    cnn = sample("cnn")
    assert cnn.batch(0)[0].shape == (64, 1, 28, 28)
    build(cnn)(cnn.batch(0)[0][:4])


# ---------------------------------------------------------------------------
# bug scripts: each shows exactly its intended symptom


@pytest.mark.parametrize("name", BUG_SCRIPTS + SCRIPT_ERRORS)
def test_bug_script_documents_its_finding(name):
    text = (BUGS / f"{name}.py").read_text()
    assert text.startswith('"""'), "needs a top docstring"
    doc = text.split('"""')[1]
    assert f"``{FINDING[name]}``" in doc


@pytest.mark.parametrize("name", BUG_SCRIPTS)
def test_bug_script_is_deterministic(name):
    mod = bug(name)
    net = build(mod)
    x0, y0 = mod.batch(0)
    try:
        loss = forward_loss(mod, net)
        if isinstance(loss, torch.Tensor) and loss.dim() == 0:
            loss.backward()
    except RuntimeError:
        pass  # inplace.py fails in backward by design
    x1, y1 = mod.batch(0)
    assert torch.equal(x0, x1) and torch.equal(y0, y1)
    for p, q in zip(build(mod, 5).parameters(), build(mod, 5).parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("name, cut", [("detach", "encoder"), ("numpy_roundtrip", "backbone"),
                                       ("no_grad", "embed"), ("argmax", "encoder"),
                                       ("unused_submodule", "norm")])
def test_unreachable_bugs(name, cut):
    mod = bug(name)
    net = build(mod)
    loss = forward_loss(mod, net)
    assert torch.isfinite(loss) and loss.dim() == 0
    loss.backward()
    assert_unreachable(net, cut)


def test_item_loss_is_a_float():
    mod = bug("item_loss")
    loss = forward_loss(mod, build(mod))
    assert isinstance(loss, float) and not isinstance(loss, torch.Tensor)
    assert math.isfinite(loss)


def test_vector_loss_is_not_scalar():
    mod = bug("vector_loss")
    loss = forward_loss(mod, build(mod))
    assert isinstance(loss, torch.Tensor) and loss.numel() > 1
    with pytest.raises(RuntimeError, match="scalar"):
        loss.backward()
    loss2 = forward_loss(mod, build(mod))
    loss2.mean().backward()  # fine once reduced


def test_inplace_breaks_backward():
    mod = bug("inplace")
    loss = forward_loss(mod, build(mod))
    assert torch.isfinite(loss)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_softmax_log_gives_inf_loss_and_nan_grads():
    mod = bug("softmax_log")
    net = build(mod)
    loss = forward_loss(mod, net)
    assert not torch.isfinite(loss)
    loss.backward()
    assert any(torch.isnan(p.grad).any() for p in net.parameters())
    # the same logits with a stable loss are fine
    x, y = mod.batch(0)
    assert torch.isfinite(torch.nn.functional.cross_entropy(net(x), y))


def test_dead_relu_outputs_zero():
    mod = bug("dead_relu")
    net = build(mod)
    seen = {}
    net.hidden_act.register_forward_hook(lambda m, i, o: seen.update(out=o.detach()))
    forward_loss(mod, net).backward()
    out = seen["out"]
    dead_units = (out == 0).all(dim=0).float().mean()
    assert dead_units > 0.9
    assert float(net.hidden.weight.grad.abs().max()) == 0.0
    # the earlier ReLU is alive
    x, _ = mod.batch(0)
    assert (net.inp_act(net.inp(x)) > 0).any(dim=0).float().mean() > 0.5


def test_sigmoid_init_saturates():
    mod = bug("sigmoid_init")
    net = build(mod)
    seen = {}
    net.act1.register_forward_hook(lambda m, i, o: seen.update(out=o.detach()))
    loss = forward_loss(mod, net)
    assert torch.isfinite(loss)
    out = seen["out"]
    saturated = ((out < 0.01) | (out > 0.99)).float().mean()
    assert saturated > 0.5


def test_deep_sigmoid_vanishes():
    mod = bug("deep_sigmoid")
    net = build(mod)
    forward_loss(mod, net).backward()
    linears = [m for m in net.layers if isinstance(m, nn.Linear)]
    assert len(linears) >= 20
    first, last = linears[0].weight.grad.norm(), linears[-1].weight.grad.norm()
    assert float(last) > 0
    assert float(first) < 1e-6 * float(last)


def test_exploding_grads():
    mod = bug("exploding")
    net = build(mod)
    loss = forward_loss(mod, net)
    assert torch.isfinite(loss)
    loss.backward()
    norms = [float(p.grad.norm()) for p in net.parameters()]
    assert all(math.isfinite(n) for n in norms)
    assert max(norms) > 1e4


def test_bad_backward_fails_gradcheck():
    mod = bug("bad_backward")
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert not torch.autograd.gradcheck(mod.Square.apply, (x,), raise_exception=False)
    assert torch.autograd.gradcheck(lambda t: t * t, (x,))
    net = build(mod)
    loss = forward_loss(mod, net)
    loss.backward()  # trains "fine": every parameter gets a finite gradient
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters())


def test_frozen_is_otherwise_healthy():
    mod = bug("frozen")
    net = build(mod)
    loss = forward_loss(mod, net)
    loss.backward()
    frozen = [n for n, p in net.named_parameters() if not p.requires_grad]
    trainable = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    assert frozen and all(n.startswith("features.") for n in frozen)
    assert all(p.grad is None for p in net.parameters() if not p.requires_grad)
    assert trainable and all(p.grad is not None and torch.isfinite(p.grad).all()
                             and float(p.grad.abs().sum()) > 0 for _, p in trainable)
    mod.optimizer(net.parameters()).step()


# ---------------------------------------------------------------------------
# script-error scripts


def test_syntax_error_script():
    with pytest.raises(SyntaxError):
        bug("syntax_error")


def test_import_error_script():
    with pytest.raises(ImportError):
        bug("import_error")


def test_missing_batch_script():
    mod = bug("missing_batch")
    assert not hasattr(mod, "batch")
    assert hasattr(mod, "model") and hasattr(mod, "loss_fn")
