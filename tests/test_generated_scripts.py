"""Generated model scripts never carry what the user typed as code (issue #24, case 2).

Before: ``--weights 'x";__import__("pathlib").Path("m").touch();".pt'`` created ``m`` (the path was pasted
into ``GRADVIZ_NOTE = "..."``); a ``.pt2`` named with three double quotes did the same through the docstring; a newline
or ``\\N`` in a name was a SyntaxError in gradviz's own script; an edited cached script ran as it was.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import gradviz
from gradviz.core.runtime.errors import ScriptError
from gradviz.core.script import generated
from gradviz.core.script.generated import RECIPE_TEMPLATE, WEIGHTS_TEMPLATE, model_source

SCRIPT = """\
import torch
from torch import nn
model = lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
def batch(step):
    return torch.ones(5, 4) * (step + 1), None
def loss_fn(out, y):
    return out.pow(2).sum()
"""
EXPORT = """\
import sys, torch
from torch import nn
torch.manual_seed(0)
torch.export.save(torch.export.export(nn.Linear(3, 2), (torch.randn(4, 3),)), sys.argv[1])
"""
# names a user may have (or an attacker may choose): each would have been code in the old templates
NAMES = ['x";__import__("pathlib").Path("m_inject").touch();".pt',
         'q"""\n__import__("pathlib").Path("m_inject").touch()\n"""q.pt',
         "n\\N{x}\\Nn.pt", "line\nbreak.pt", "tab\tand 'single' quotes.pt"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cache" / "models"


@pytest.mark.parametrize("name", NAMES)
def test_a_weights_file_name_is_data(tmp_path, cache, name):
    script = tmp_path / "net.py"
    script.write_text(SCRIPT)
    torch.manual_seed(1)
    built = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    torch.save(built.state_dict(), tmp_path / name)
    path, note = model_source(str(script), weights=str(tmp_path / name))
    assert Path(path).read_text() == WEIGHTS_TEMPLATE                    # nothing of the name in the code
    loaded = gradviz.load_script(path)
    model = loaded.new_model()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), built.state_dict().values()))
    assert loaded.note.endswith(str(tmp_path / name)) and name in note
    assert not (tmp_path / "m_inject").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One small torch.export program, written in a fresh interpreter (export traces imports)."""
    program = tmp_path_factory.mktemp("program") / "linear.pt2"
    subprocess.run([sys.executable, "-c", EXPORT, str(program)], check=True, capture_output=True, timeout=300)
    return program


@pytest.mark.parametrize("name", [n.replace(".pt", ".pt2") for n in NAMES])
def test_a_program_file_name_is_data(tmp_path, cache, exported, name):
    program = tmp_path / name
    shutil.copy(exported, program)
    path, note = model_source(str(program))
    assert Path(path).read_text() == RECIPE_TEMPLATE
    loaded = gradviz.load_script(path)
    graph = gradviz.trace(path)
    assert loaded.source == str(program.resolve()) and graph.graph["model_source"] == str(program.resolve())
    assert "param:weight" in graph.nodes and not (tmp_path / "m_inject").exists()


def test_an_edited_cached_script_is_written_again_before_it_runs(tmp_path, cache):
    (tmp_path / "mods.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(8, 2)\n")
    path, _ = model_source("mods:build", ["2,8"])
    recipe = Path(path).with_suffix(".json")
    for victim, evil in ((Path(path), 'open("m_cache", "w").close()\n' + RECIPE_TEMPLATE),
                         (recipe, recipe.read_text().replace('"mods:build"', '"os:getcwd"'))):
        victim.write_text(evil)
        again, _ = model_source("mods:build", ["2,8"])
        assert again == path and Path(path).read_text() == RECIPE_TEMPLATE
        assert '"mods:build"' in recipe.read_text()
        gradviz.load_script(again).new_model()
    assert not (tmp_path / "m_cache").exists()


def test_a_link_in_the_cache_is_replaced_not_followed(tmp_path, cache):
    (tmp_path / "mods.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(8, 2)\n")
    path, _ = model_source("mods:build", ["2,8"])
    evil = tmp_path / "evil.py"
    evil.write_text(RECIPE_TEMPLATE)        # the same bytes, but someone else's file: not trusted
    os.unlink(path)
    os.symlink(evil, path)
    again, _ = model_source("mods:build", ["2,8"])
    assert not Path(again).is_symlink() and Path(again).read_text() == RECIPE_TEMPLATE


def test_a_damaged_recipe_is_one_clear_error(tmp_path, cache):
    (tmp_path / "mods.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(8, 2)\n")
    path, _ = model_source("mods:build", ["2,8"])
    Path(path).with_suffix(".json").write_text('{"recipe": {"target": "mods:build", "inputs": [{"shape": [-1]}]},'
                                               ' "search": []}')
    with pytest.raises(ScriptError) as info:
        gradviz.load_script(path)
    assert "recipe is damaged (inputs)" in str(info.value)


@pytest.mark.parametrize("where", ["/dev/null", "file", "read-only"])
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, where):
    if where == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    target = {"/dev/null": "/dev/null", "file": str(tmp_path / "cachefile"), "read-only": str(tmp_path / "ro")}[where]
    (tmp_path / "cachefile").write_text("x")
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o555)
    monkeypatch.setenv("GRADVIZ_CACHE", target)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mods.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(8, 2)\n")
    with pytest.raises(ScriptError) as info:
        model_source("mods:build", ["2,8"])
    assert "GRADVIZ_CACHE" in str(info.value) and "\n" not in str(info.value)


def test_the_cli_says_so_for_gradviz_cache_dev_null(tmp_path, monkeypatch, capsys):
    from gradviz.cli.main import main

    monkeypatch.setenv("GRADVIZ_CACHE", "/dev/null")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mods.py").write_text("from torch import nn\ndef build():\n    return nn.Linear(8, 2)\n")
    assert main(["check", "mods:build", "--input", "2,8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/dev/null/models" in err[0] and "bug in gradviz" not in err[0]


def test_generated_scripts_are_the_two_templates_only():
    """The module writes no other code: both templates compile, and nothing is formatted into them."""
    import inspect

    for template in (RECIPE_TEMPLATE, WEIGHTS_TEMPLATE):
        compile(template, "generated.py", "exec")
    source = inspect.getsource(generated)
    assert ".format(" not in source and "TEMPLATE %" not in source and 'f"""' not in source
