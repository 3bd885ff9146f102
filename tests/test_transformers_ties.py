"""Tied (shared) parameters are one parameter everywhere, on real transformers models from tiny configs.

Sources: huggingface/transformers#30202 (``save_pretrained`` leaves the tied ``lm_head.weight`` out of
model.safetensors, and other loaders then fail on the missing key); huggingface/transformers#47979 and
pytorch/pytorch#127357 (``torch.export`` lifts a tied weight once: the program's graph reads one of the two
names). Torch is the oracle: values loaded equal the saved model's, gradients equal ``backward``'s.
"""
from __future__ import annotations

import io
import sys
from contextlib import redirect_stderr, redirect_stdout

import pytest
import torch

import transformers  # noqa: E402  (a test dependency: never skipped, tests/test_honest_skips.py)

from gradviz.core.runtime.errors import ScriptError  # noqa: E402
from gradviz.core.runtime.ties import retie, tie_groups, tied_with  # noqa: E402
from gradviz.core.script.checkpoints import load_weights  # noqa: E402
from gradviz.core.script.generated import model_source  # noqa: E402

FACTORY = '''\
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def gpt2():
    torch.manual_seed(1)     # other values than the saved model's: loading must change them
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16))
    model.config.use_cache = False
    return model


class Logits(torch.nn.Module):
    """What one exports: the model with a tensor output (a ModelOutput needs transformers to be read back)."""

    def __init__(self):
        super().__init__()
        self.m = gpt2()

    def forward(self, ids):
        return self.m(ids).logits
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hfties")
    (folder / "tinyhf.py").write_text(FACTORY)
    sys.path.insert(0, str(folder))
    import tinyhf

    torch.manual_seed(0)
    saved = tinyhf.GPT2LMHeadModel(tinyhf.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16))
    with redirect_stderr(io.StringIO()):
        saved.save_pretrained(folder / "hf")
    from safetensors.torch import save_model

    save_model(saved, str(folder / "save_model.safetensors"))
    torch.save(saved.state_dict(), folder / "pytorch_model.bin")
    yield folder, saved, tinyhf
    sys.path.remove(str(folder))
    sys.modules.pop("tinyhf", None)


def test_gpt2_ties_are_found_by_identity(project):
    _, saved, _ = project
    assert tie_groups(saved) == [["transformer.wte.weight", "lm_head.weight"]]
    assert tied_with(saved) == {"transformer.wte.weight": ["lm_head.weight"]}


@pytest.mark.parametrize("name", ["hf/model.safetensors", "save_model.safetensors", "pytorch_model.bin"])
def test_weights_that_store_a_tie_once_load_into_the_tied_model(project, name):
    """save_pretrained keeps wte and drops lm_head; safetensors' save_model keeps lm_head and drops wte; .bin
    keeps both (one storage): each fills the whole model, the tie intact."""
    folder, saved, tinyhf = project
    from safetensors.torch import load_file

    if name.endswith(".safetensors"):
        stored = set(load_file(str(folder / name)))
        assert len(stored) == len(saved.state_dict()) - 1        # the file really leaves one tied name out
    model = tinyhf.gpt2()
    assert not torch.equal(model.transformer.wte.weight, saved.transformer.wte.weight)
    load_weights(model, folder / name)
    for key, value in saved.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert model.lm_head.weight is model.transformer.wte.weight


def test_a_tie_holding_two_values_in_the_file_is_refused(project, tmp_path):
    folder, saved, tinyhf = project
    state = {k: v.clone() for k, v in saved.state_dict().items()}
    state["lm_head.weight"] += 1
    torch.save(state, tmp_path / "split.bin")
    with pytest.raises(ScriptError, match="transformer.wte.weight and lm_head.weight are one tensor in the model"):
        load_weights(tinyhf.gpt2(), tmp_path / "split.bin")


def test_the_trace_draws_a_tie_as_one_parameter_with_its_twin_named(project, monkeypatch):
    folder, saved, tinyhf = project
    import gradviz

    monkeypatch.chdir(folder)
    path, _ = model_source("tinyhf:gpt2", ["2,8:long"], "sum", str(folder / "hf" / "model.safetensors"))
    with redirect_stderr(io.StringIO()):
        graph = gradviz.trace(path)
    params = [n for n, a in graph.nodes(data=True) if a.get("kind") == "param"]
    assert "param:transformer.wte.weight" in params and "param:lm_head.weight" not in params
    wte = graph.nodes["param:transformer.wte.weight"]
    assert wte["tied"] == ["lm_head.weight"]
    # the oracle: the same model, weights and invented ids through torch; the tie's gradient is the sum of uses
    model = tinyhf.gpt2()
    load_weights(model, folder / "hf" / "model.safetensors")
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    model(ids).logits.float().sum().backward()
    assert wte["grad_norm"] == pytest.approx(model.transformer.wte.weight.grad.norm().item(), rel=1e-5)


def test_a_program_with_a_tie_is_one_parameter_reached_and_gradchecked(project, tmp_path, monkeypatch):
    """The exported GPT-2 reads the tied weight under one name only (transformers#47979): before, check said
    ``transformer.wte.weight`` was never reached and the numerical check crashed on the float32 dtype
    asserts the program holds ("Tensor dtype mismatch! Expected: Float, got double")."""
    folder, saved, tinyhf = project
    import gradviz
    from gradviz.core.diagnosis import gradcheck_script

    monkeypatch.chdir(folder)
    model = tinyhf.Logits().eval()     # exported without dropout: the program's gradient is deterministic
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    program = torch.export.export(model, (ids,), strict=False)
    torch.export.save(program, tmp_path / "gpt2.pt2")
    path, _ = model_source(str(tmp_path / "gpt2.pt2"))
    script = gradviz.load_script(path)
    built = script.new_model()
    names = [n for n, _ in built.named_parameters()]
    assert "m.transformer.wte.weight" in names and "m.lm_head.weight" not in names    # retied: one parameter
    assert built.get_parameter("m.lm_head.weight") is built.get_parameter("m.transformer.wte.weight")
    with redirect_stderr(io.StringIO()), redirect_stdout(io.StringIO()):
        findings = gradviz.check(path)
    assert not [f for f in findings if f.severity == "error"], [f.message for f in findings]
    assert not [f for f in findings if f.code == "check-incomplete"], [f.message for f in findings]
    report = gradcheck_script(script, params=["m.transformer.wte.weight", "m.transformer.ln_f.bias"], samples=2)
    assert [p.name for p in report.params] == ["m.transformer.wte.weight", "m.transformer.ln_f.bias"]
    assert all(p.checked == 2 for p in report.params)
    assert report.lowest_dtype == "float32" and any("traced graph" in n for n in report.notes)
    # the tied weight's gradient in the program is the sum over both uses, as in the Python model
    model.zero_grad()
    model(ids).sum().backward()
    with redirect_stderr(io.StringIO()):
        graph = gradviz.trace(path)
    assert graph.nodes["param:m.transformer.wte.weight"]["grad_norm"] == pytest.approx(
        model.m.transformer.wte.weight.grad.norm().item(), rel=1e-4)


def test_retie_leaves_separate_tensors_alone():
    lin = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    assert retie(lin) == [] and tie_groups(lin) == []
    lin[1].weight = torch.nn.Parameter(lin[0].weight.data)      # two objects over one storage
    assert tie_groups(lin) == [["0.weight", "1.weight"]]
    assert retie(lin) == [["0.weight", "1.weight"]] and lin[1].weight is lin[0].weight


def test_a_recorded_run_counts_a_tie_once(project, tmp_path):
    """The global norm of a tied GPT-2 is over its parameters (the tie once), as clip_grad_norm_ computes it."""
    import gradviz

    _, _, tinyhf = project
    model = tinyhf.gpt2()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    with gradviz.watch(model, tmp_path / "tied.gvrun", every=1) as w:
        model(ids, labels=ids).loss.backward()
        w.step(1.0)
    run = gradviz.open_run(tmp_path / "tied.gvrun")
    assert "lm_head.weight" not in run.param_names and "transformer.wte.weight" in run.param_names
    once = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item()
    assert run.grad_norm[0] == pytest.approx(once, rel=1e-5)
