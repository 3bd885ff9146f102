"""The numerical gradient check: agrees with torch.autograd.gradcheck, leaves the user's
model alone, samples, cancels, and the ``gradviz gradcheck`` command."""
from __future__ import annotations

import io
import json
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch

from gradviz.core.diagnosis.gradcheck import gradcheck_script
from gradviz.core.diagnosis.numeric import gradcheck_function
from gradviz.core.script.load import load_script

ROOT = Path(__file__).resolve().parent.parent
BUGS = ROOT / "samples" / "bugs"
SAMPLES = ROOT / "samples"


class GoodCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2


class BadCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x ** 2


class BadMixer(torch.autograd.Function):
    """Right diagonal, wrong off-diagonal: only a full Jacobian check sees it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.stack([x[0] * x[1], x[1]])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.stack([g[0] * x[1], g[0] * x[1] + g[1]])   # d(x0 x1)/dx1 is x0, not x1


FUNCTIONS = [
    (GoodCube.apply, True, 5), (BadCube.apply, False, 5), (BadMixer.apply, False, 2),
    (lambda x: torch.sin(x) * x, True, 5), (lambda x: torch.log1p(x.exp()).sum(), True, 5),
]


@pytest.mark.parametrize("fn, expected, n", FUNCTIONS)
def test_agrees_with_torch_gradcheck(fn, expected, n):
    torch.manual_seed(0)
    x = torch.randn(n, dtype=torch.float64, requires_grad=True)
    theirs = torch.autograd.gradcheck(fn, (x,), raise_exception=False)
    ours = gradcheck_function(fn, [x])
    assert theirs == expected
    assert all(r.passed for r in ours) == theirs
    assert ours[0].checked > 0


def test_two_inputs_and_large_input_projection():
    torch.manual_seed(0)
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    res = gradcheck_function(torch.matmul, [a, b])
    assert [r.passed for r in res] == [True, True] and res[0].checked == 12 * 6
    big = torch.randn(40, 40, dtype=torch.float64, requires_grad=True)
    res = gradcheck_function(BadCube.apply, [big], samples=8)
    assert not res[0].passed and res[0].checked == 8


def test_script_check_leaves_the_users_model_unchanged():
    script = load_script(BUGS / "bad_backward.py")
    torch.manual_seed(0)
    model = script.new_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = gradcheck_script(script, model=model, samples=4)
    assert not report.ok
    assert {p.name for p in report.failed if p.kind == "param"} == {"fc1.weight", "fc1.bias"}
    assert any(f.function and f.function.endswith("Square") for f in report.functions)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float32


def test_healthy_sample_passes_and_samples_are_counted():
    report = gradcheck_script(SAMPLES / "mlp_digits.py", samples=3)
    assert report.ok, [(p.name, p.max_rel) for p in report.failed]
    fc1 = next(p for p in report.params if p.name == "fc1.weight")
    assert fc1.checked + fc1.skipped == 3 and fc1.numel == 64 * 128
    bias = next(p for p in report.params if p.name == "fc3.bias")
    assert bias.checked + bias.skipped == 3
    assert report.dtype == "float64" and report.to_dict()["ok"] is True


def test_dropout_does_not_break_the_check(tmp_path):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_diagnosis_scripts as diag_scripts
    report = gradcheck_script(diag_scripts.write(tmp_path, "healthy_dropout_bn"), samples=4)
    assert report.ok and any("dropout" in n for n in report.notes)


def test_params_selection_and_unknown_name():
    report = gradcheck_script(BUGS / "bad_backward.py", params=["fc2.bias"], samples=None)
    assert [p.name for p in report.params] == ["fc2.bias"] and report.params[0].checked == 3
    with pytest.raises(ValueError):
        gradcheck_script(BUGS / "bad_backward.py", params=["nope"])


def test_cancel_stops_within_an_element():
    calls = []
    stop = threading.Event()

    def progress(done, total, name):
        calls.append(done)
        if done == 5:
            stop.set()

    report = gradcheck_script(SAMPLES / "mlp_digits.py", samples=16, progress=progress, cancel=stop)
    assert report.cancelled and max(calls) == 5
    assert sum(p.checked + p.skipped for p in report.params) == 5


def _cli(argv):
    from gradviz.cli.main import main
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def test_cli_gradcheck():
    rc, out = _cli(["gradcheck", str(BUGS / "bad_backward.py"), "--samples", "4"])
    assert rc == 1 and "fc1.weight" in out and "FAIL" in out
    rc, out = _cli(["gradcheck", str(SAMPLES / "mlp_digits.py"), "--samples", "2", "--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True
    assert {"name", "checked", "max_abs", "max_rel", "passed"} <= set(doc["params"][0])
    assert _cli(["gradcheck", str(BUGS / "syntax_error.py")])[0] == 2
    assert _cli(["gradcheck", str(BUGS / "vector_loss.py")])[0] == 2


def test_sparse_embedding_gradients_are_checked():
    from gradviz.core.diagnosis import check

    script = load_script(ROOT / "tests" / "scripts" / "sparse_embedding.py")
    report = gradcheck_script(script, samples=8)
    assert report.ok and [p.name for p in report.params] == ["emb.weight", "lin.weight", "lin.bias"]
    findings = check(ROOT / "tests" / "scripts" / "sparse_embedding.py", steps=3)
    assert not [f for f in findings if f.severity == "error"], findings
