"""The Python API takes what the CLI takes (issue #28): ``gradviz.check(loss)`` and ``check(model)`` raised a raw
TypeError; ``gradviz.trace("pkg:callable")`` and ``trace("net.pt2")`` failed; a packaged sample had no short
name. Torch is the oracle for the gradients shown."""
from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch
from torch import nn

import gradviz
from gradviz.cli.main import main
from gradviz.core.runtime.errors import ScriptError
from gradviz.resources import sample

PACKAGE = '''\
import torch
from torch import nn


def mlp(width=8):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 3))
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "apipkg.py").write_text(PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("what", ["loss", "model"])
def test_check_of_a_tensor_or_a_model_says_what_to_pass(what):
    model = nn.Linear(3, 2)
    source = model(torch.ones(2, 3)).sum() if what == "loss" else model
    with pytest.raises(TypeError, match="needs what builds the model .* gradviz.trace"):
        gradviz.check(source)


def test_trace_a_callable_with_inputs_and_config_like_the_cli(project):
    graph = gradviz.trace("apipkg:mlp", inputs="4,6", config="width=5", loss="mean")
    assert graph.nodes["param:0.weight"]["shape"] == [5, 6]
    from apipkg import mlp
    model = mlp(width=5)
    x = torch.randn((4, 6), generator=torch.Generator().manual_seed(0))
    model(x).float().mean().backward()
    assert graph.nodes["param:2.bias"]["grad_norm"] == pytest.approx(model[2].bias.grad.norm().item(), rel=1e-5)
    with pytest.raises(ScriptError, match="needs inputs"):
        gradviz.trace("apipkg:mlp")


def test_trace_a_program_like_the_cli(project):
    from apipkg import mlp
    model = mlp()
    x = torch.randn(4, 6)
    torch.export.save(torch.export.export(model, (x,), strict=False), project / "net.pt2")   # torch 2.6: strict export trips on PySide
    graph = gradviz.trace(str(project / "net.pt2"))
    model(x).float().sum().backward()
    assert graph.nodes["param:0.weight"]["grad_norm"] == pytest.approx(model[0].weight.grad.norm().item(), rel=1e-5)


def test_trace_a_module_with_inputs_watches_its_forward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 3)))
    x = torch.randn(4, 6)
    graph = gradviz.trace(model, inputs=(x,))
    relu = [a for _, a in graph.nodes(data=True) if a.get("op", "").startswith("Relu")]
    assert relu and relu[0]["module"] == "1.0"              # recorded by the forward capture, not guessed
    model(x).sum().backward()
    assert graph.nodes["param:1.1.weight"]["grad_norm"] == pytest.approx(model[1][1].weight.grad.norm().item(),
                                                                          rel=1e-5)
    with pytest.raises(TypeError, match="give its forward's inputs"):
        gradviz.trace(model)


def test_samples_by_short_name_in_the_api_and_the_cli(tmp_path):
    assert sample("mlp_digits") is not None
    graph = gradviz.trace("@mlp_digits")
    assert graph.graph["script"] == str(sample("mlp_digits"))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["export", "@bugs/detach", "-o", str(tmp_path / "d.json")])
    assert status == 0, err.getvalue()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["export", "@no_such_sample", "-o", str(tmp_path / "n.json")])
    assert status == 2 and "@no_such_sample: no such sample (samples: @bugs/" in err.getvalue()
