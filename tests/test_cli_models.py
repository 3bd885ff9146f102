"""A model without a script, as users give it: a callable and input shapes, a .pt2 program, weights.

Through ``main()`` as the command line runs it; torch is the oracle for every gradient shown.
"""
from __future__ import annotations

import io
import json
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz
from gradviz.cli.main import main
from gradviz.core.script.factory import parse_input, parse_loss
from gradviz.core.script.generated import model_source
from gradviz.core.runtime.errors import ScriptError

PACKAGE = '''\
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(37, 8)
        self.head = nn.Linear(8, 5)

    def forward(self, ids):
        return self.head(self.emb(ids))


class Pair(nn.Module):
    """Two positional inputs: features and token ids."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 6)
        self.lin = nn.Linear(6, 4)

    def forward(self, x, ids):
        return self.lin(x + self.emb(ids))


def pair():
    torch.manual_seed(0)
    return Pair()


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def tagger():
    torch.manual_seed(0)
    return Tagger()


not_callable = 3
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's package in the current folder, and gradviz's generated scripts in a private cache."""
    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "__init__.py").write_text("")
    (tmp_path / "userpkg" / "models.py").write_text(PACKAGE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def run_cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main([str(a) for a in argv])
    return status, out.getvalue(), err.getvalue()


def test_parse_input_and_loss():
    assert parse_input("1,3,224,224").shape == (1, 3, 224, 224)
    spec = parse_input("2,16:long:1000")
    assert (spec.dtype, spec.high, spec.integer) == (torch.int64, 1000, True)
    assert parse_input("4x8:bfloat16").dtype == torch.bfloat16
    for bad in ("", "1,-3", "2,a", "2:complex", "2:float:10", "2:long:0", "2:long:5:6"):
        with pytest.raises(ValueError):
            parse_input(bad)
    assert parse_loss("ce:10").classes == 10 and parse_loss(None).kind == "sum"
    for bad in ("max", "sum:3", "ce:x"):
        with pytest.raises(ValueError):
            parse_loss(bad)


def test_export_a_callable_with_an_invented_input_and_loss(project):
    status, out, err = run_cli("export", "userpkg.models:mlp", "--input", "4,6", "--loss", "ce", "-o", "g.json")
    assert status == 0, err
    assert err.startswith("gradviz: userpkg.models:mlp: invented input 0 float32 4×6 ~N(0,1) (seeded by the step)")
    assert "loss cross-entropy vs random classes in [0, last dim)" in err
    assert out.startswith(f"wrote {project / 'g.json'} ")
    graph = json.loads((project / "g.json").read_text())
    assert graph["graph"]["model_source"] == "userpkg.models:mlp" and graph["graph"]["invented"] in err
    status, _, err = run_cli("export", "userpkg.models:mlp", "--input", "4,6", "-o", "g.svg")
    svg = (project / "g.svg").read_text()
    assert status == 0 and ">userpkg.models:mlp<" in svg and "userpkg_models" not in svg   # titled as it was named
    norms = {n["id"]: n.get("grad_norm") for n in graph["nodes"]}
    # torch is the oracle: the same model, inputs and loss, by hand
    from userpkg.models import mlp
    model = mlp()
    g = torch.Generator().manual_seed(0)
    x = torch.randn((4, 6), generator=g)
    out_t = model(x)
    target = torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(0))
    nn.functional.cross_entropy(out_t, target).backward()
    assert norms["param:0.weight"] == pytest.approx(model[0].weight.grad.norm().item(), rel=1e-5)
    assert norms["param:2.bias"] == pytest.approx(model[2].bias.grad.norm().item(), rel=1e-5)


def test_token_ids_stay_inside_the_input_embedding(project):
    path, note = model_source("userpkg.models:tagger", ["3,11:long"], "mean")
    assert "ids in [0, the input embedding's size, else 2)" in note and "loss mean(output)" in note
    script = gradviz.load_script(path)
    model = script.new_model()
    assert script.note == note.replace("the input embedding's size, else 2)", "37) (the input embedding emb)")
    (ids,), _ = script.get_batch(0)
    assert ids.dtype == torch.int64 and ids.shape == (3, 11) and 0 <= ids.min() and ids.max() < 37
    assert torch.equal(script.get_batch(0)[0][0], ids) and not torch.equal(script.get_batch(1)[0][0], ids)
    graph = gradviz.trace(path)
    model.zero_grad()
    model(ids).float().mean().backward()
    assert graph.nodes["param:emb.weight"]["grad_norm"] == pytest.approx(model.emb.weight.grad.norm().item(), rel=1e-5)


def test_token_id_range_is_stated_once_the_model_is_built(project):
    status, _, err = run_cli("export", "userpkg.models:tagger", "--input", "3,11:long", "-o", "t.json")
    assert status == 0, err
    assert "gradviz: userpkg.models:tagger: input 0: token ids in [0, 37) (the input embedding emb;" in err
    status, _, err = run_cli("export", "userpkg.models:tagger", "--input", "3,11:long:5", "-o", "t.json")
    assert status == 0 and "ids in [0, 5)" in err and "token ids in [0, 37)" not in err     # HIGH given: no guess


def test_one_input_per_positional_argument(project):
    status, _, err = run_cli("export", "userpkg.models:pair", "--input", "2,3,6", "--input", "2,3:long", "-o", "p.json")
    assert status == 0, err
    assert "invented input 0 float32 2×3×6 ~N(0,1), input 1 int64 2×3 ids in [0, the input embedding's" in err
    assert "input 1: token ids in [0, 11) (the input embedding emb;" in err
    nodes = {n["id"]: n for n in json.loads((project / "p.json").read_text())["nodes"]}
    from userpkg.models import pair
    model = pair()
    g = torch.Generator().manual_seed(0)                 # the inputs are drawn in order from one generator
    x = torch.randn((2, 3, 6), generator=g)
    ids = torch.randint(0, 11, (2, 3), generator=g)
    model(x, ids).sum().backward()
    assert nodes["param:emb.weight"]["grad_norm"] == pytest.approx(model.emb.weight.grad.norm().item(), rel=1e-5)
    status, _, err = run_cli("export", "userpkg.models:pair", "--input", "2,3,6", "-o", "p.json")
    assert status == 2 and "missing 1 required positional argument: 'ids'" in err and "--input" in err


def test_check_train_and_gradcheck_take_the_same_options(project):
    status, out, err = run_cli("check", "userpkg.models:mlp", "--input", "5,6", "--json", "--no-gradcheck")
    assert status == 0 and json.loads(out)["ok"] is True, out + err
    status, out, err = run_cli("check", "userpkg.models:mlp", "--input", "5,6", "--no-gradcheck")
    assert status == 0 and out.startswith("gradviz check userpkg.models:mlp\n"), out       # as the user named it
    assert "the numerical gradient check was not run: --no-gradcheck" in out               # not called healthy
    status, out, _ = run_cli("train", "userpkg.models:mlp", "--input", "5,6", "--loss", "ce:3", "--steps", "3",
                             "--every", "1", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and rows[-1]["summary"] and rows[-1]["steps"] == 3
    status, out, _ = run_cli("gradcheck", "userpkg.models:mlp", "--input", "2,6:float64", "--json", "--samples", "3")
    assert status == 0 and json.loads(out)["ok"] is True


@pytest.mark.parametrize("argv, says", [
    (["userpkg.models:mlp"], "needs inputs: give --input SHAPE"),
    (["userpkg.models:nope", "--input", "2,6"], "'userpkg.models' has no 'nope'"),
    (["nopkg_gradviz.models:mlp", "--input", "2,6"], "cannot import 'nopkg_gradviz.models'"),
    (["userpkg.models:not_callable", "--input", "2,6"], "is a int, not a callable"),
    (["userpkg.models:mlp", "--input", "2,5"], "mat1 and mat2 shapes cannot be multiplied"),
    (["userpkg.models:mlp", "--input", "2,6", "--loss", "ce:9"], "fewer than 9 classes"),
    (["userpkg.models:mlp", "--input", "2,x"], "SHAPE is comma-separated sizes"),
    (["no/such/file.py2"], "no such file, and not PACKAGE.MODULE:CALLABLE"),
])
def test_a_bad_model_without_a_script_is_one_clear_message(project, argv, says):
    status, out, err = run_cli("export", *argv, "-o", "g.json")
    assert status == 2 and "Traceback" not in err and says in err, err
    if "--input" not in argv:     # refused before anything is imported: one line, no "invented: no inputs" note
        assert len(err.strip().splitlines()) == 1, err
    if "shapes cannot be multiplied" in says:
        # the forward itself raised: export writes the graph up to the failing call (#14 item 3)
        graph = json.loads((project / "g.json").read_text())
        failed = [n for n in graph["nodes"] if n.get("failed")]
        assert len(failed) == 1 and "mat1 and mat2" in failed[0].get("error", ""), failed
    else:
        assert not (project / "g.json").exists()


def test_input_and_loss_are_refused_for_a_script(project):
    (project / "net.py").write_text("import torch\nmodel = lambda: torch.nn.Linear(2, 1)\n"
                                    "def batch(s):\n    return torch.ones(1, 2), None\n"
                                    "def loss_fn(o, t):\n    return o.sum()\n")
    status, _, err = run_cli("export", "net.py", "--input", "1,2", "-o", "g.json")
    assert status == 2 and "--input, --loss and --config are for a model without a script" in err


def export_program(model: nn.Module, args: tuple):
    """``torch.export.export``, non-strict (no dynamo): on torch 2.6 strict export traces through the import
    hook PySide6 installs (pytest-qt loads it here) and stops at its ``sys._getframe``; 2.15's default is non-strict.
    The program saved is the same kind of file either way."""
    return torch.export.export(model, args, strict=False)


def exported(folder: Path, with_inputs: bool = True) -> tuple[nn.Module, Path, torch.Tensor]:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    program = export_program(model, (x,))
    path = folder / "prog.pt2"
    torch.export.save(program, path)
    return model, path, x


def test_a_pt2_program_opens_with_its_stored_example_inputs(project):
    model, path, x = exported(project)
    status, out, err = run_cli("export", path, "-o", "p.json")
    assert status == 0, err
    assert "the program's stored example inputs" in err
    nodes = {n["id"]: n for n in json.loads((project / "p.json").read_text())["nodes"]}
    model(x).sum().backward()
    assert nodes["param:0.weight"]["grad_norm"] == pytest.approx(model[0].weight.grad.norm().item(), rel=1e-5)
    status, out, err = run_cli("train", path, "--steps", "2", "--json")
    assert status == 0, err
    status, out, err = run_cli("check", path, "--input", "3,4", "--json", "--no-gradcheck")
    assert status == 0 and "input 0 float32 3×4 ~N(0,1)" in err and json.loads(out)["ok"] is True
    status, out, err = run_cli("check", path, "--input", "3,4:float64", "--json", "--no-gradcheck")   # --input
    assert status == 2 and "input 0 float64 3×4" in err                     # overrides the stored ones, and a
    assert "dtype" in out and "Traceback" not in err                           # float64 input meets float32 weights
    status, out, err = run_cli("check", path, "--input", "5,4", "--json", "--no-gradcheck")
    assert status == 2 and "the shapes it was exported with" in out
    assert "Guard failed" in out or "to be equal to 3, but got 5" in out     # torch 2.13+ / torch 2.6 wording


def test_a_pt2_without_stored_inputs_takes_input(project):
    model, _, x = exported(project)
    program = export_program(model, (x,))
    program._example_inputs = None          # saved by a torch that stored none, or dropped on purpose
    torch.export.save(program, project / "bare.pt2")
    status, _, err = run_cli("export", "bare.pt2", "-o", "b.json")
    assert status == 2 and "needs inputs: give --input SHAPE[:DTYPE] once per positional input" in err
    status, _, err = run_cli("export", "bare.pt2", "--input", "3,4", "-o", "b.json")
    assert status == 0 and "invented input 0 float32 3×4 ~N(0,1)" in err, err
    nodes = {n["id"]: n for n in json.loads((project / "b.json").read_text())["nodes"]}
    model.zero_grad()
    model(torch.randn((3, 4), generator=torch.Generator().manual_seed(0))).sum().backward()
    assert nodes["param:2.weight"]["grad_norm"] == pytest.approx(model[2].weight.grad.norm().item(), rel=1e-5)


class Boobytrap:
    """A pickle that runs code when unpickled (what torch.load without weights_only would do)."""

    def __init__(self, flag: Path):
        self.flag = str(flag)

    def __reduce__(self):
        return (Path.touch, (Path(self.flag),))


@pytest.mark.parametrize("name", ["trap.pt", "trap.bin", "trap.ckpt"])
def test_weights_never_unpickle_arbitrary_objects(project, name):
    flag = project / "unpickled"
    torch.save({"state_dict": {"0.weight": torch.zeros(16, 6)}, "trap": Boobytrap(flag)}, project / name)
    status, _, err = run_cli("export", "userpkg.models:mlp", "--input", "2,6", "--weights", name, "-o", "g.json")
    assert status == 2 and "gradviz never unpickles arbitrary objects" in err, err
    status, _, err = run_cli("export", name, "-o", "g.json")           # opened as the model: the same refusal
    assert status == 2 and "gradviz never unpickles arbitrary objects" in err
    assert not flag.exists()


def test_weights_files_are_refused_as_models_and_loaded_with_weights(project):
    torch.manual_seed(2)
    trained = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    torch.save(trained.state_dict(), project / "sd.pt")
    torch.save({"state_dict": trained.state_dict(), "epoch": 3}, project / "ckpt.pth")
    torch.save(trained, project / "whole.pt")
    from safetensors.torch import save_file
    save_file(trained.state_dict(), str(project / "w.safetensors"))
    for name in ("sd.pt", "ckpt.pth", "w.safetensors"):
        status, _, err = run_cli("export", name, "-o", "g.json")
        assert status == 2 and "holds weights (4 tensors), not a model" in err and "--weights" in err
    status, _, err = run_cli("export", "whole.pt", "-o", "g.json")
    assert status == 2 and "gradviz never unpickles arbitrary objects" in err
    (project / "net.py").write_text(textwrap.dedent('''\
        import torch
        from torch import nn
        model = lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        def batch(step):
            return torch.ones(3, 4), None
        def loss_fn(out, target):
            return out.pow(2).sum()
    '''))
    trained(torch.ones(3, 4)).pow(2).sum().backward()
    for weights in ("sd.pt", "ckpt.pth", "w.safetensors"):
        status, _, err = run_cli("export", "net.py", "--weights", weights, "-o", "g.json")
        assert status == 0 and f"net.py with the weights of {project / weights}" in err, err
        graph = json.loads((project / "g.json").read_text())
        nodes = {n["id"]: n for n in graph["nodes"]}
        assert nodes["param:2.weight"]["grad_norm"] == pytest.approx(trained[2].weight.grad.norm().item(), rel=1e-5)
        assert graph["graph"]["model_source"] == "net.py" and str(project / weights) in graph["graph"]["invented"]


def test_a_program_given_as_weights_is_named(project):
    _, path, _ = exported(project)
    status, _, err = run_cli("export", "userpkg.models:mlp", "--input", "2,6", "--weights", path, "-o", "g.json")
    assert status == 2 and "a torch.export program (.pt2), a whole model, not a state_dict" in err
    assert "weights from" in err


def test_weights_that_do_not_fit_name_the_keys(project):
    torch.save(nn.Linear(4, 3).state_dict(), project / "other.pt")
    status, _, err = run_cli("export", "userpkg.models:mlp", "--input", "2,6", "--weights", "other.pt", "-o", "g.json")
    assert status == 2 and "the weights do not fit the model" in err
    assert "4 missing (0.bias, 0.weight, 2.bias, 2.weight)" in err and "2 unexpected (bias, weight)" in err


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_a_torchscript_archive_is_named(project):
    torch.jit.save(torch.jit.script(nn.Linear(2, 2)), str(project / "scripted.pt"))
    with pytest.raises(ScriptError, match="TorchScript archive"):
        model_source(str(project / "scripted.pt"))


def test_the_app_opens_a_callable_from_the_command_line(project):
    """``gradviz PACKAGE.MODULE:CALLABLE --input ...`` is the window (shot offscreen), not only the commands."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-m", "gradviz", "userpkg.models:mlp", "--input", "4,6", "--loss", "ce",
                           "--screenshot", "shot.png", "--size", "900x600"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "gradviz: userpkg.models:mlp: invented input 0 float32 4×6" in proc.stderr
    assert (project / "shot.png").read_bytes()[:4] == b"\x89PNG"
    _, program, _ = exported(project)      # a .pt2 on the command line opens in the window too
    proc = subprocess.run([sys.executable, "-m", "gradviz", program.name, "--screenshot", "prog.png", "--size",
                           "900x600"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "prog.pt2: the program's stored example inputs" in proc.stderr, proc.stderr
    assert (project / "prog.png").read_bytes()[:4] == b"\x89PNG"
    torch.save(nn.Linear(2, 2).state_dict(), project / "sd.pt")
    proc = subprocess.run([sys.executable, "-m", "gradviz", "sd.pt"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "holds weights (2 tensors), not a model" in proc.stderr
