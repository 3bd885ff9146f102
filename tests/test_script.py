"""Bad scripts give one clear error naming the problem and its file:line."""
from __future__ import annotations

from pathlib import Path

import pytest

import gradviz
from gradviz.core.script.load import ScriptError, load_script

SCRIPTS = Path(__file__).parent / "scripts"


def error_of(name: str) -> ScriptError:
    with pytest.raises(ScriptError) as info:
        gradviz.trace(SCRIPTS / name)
    return info.value


def test_syntax_error_names_the_line():
    err = error_of("bad_syntax.py")
    assert err.code == "script-error"
    assert err.location == f"{SCRIPTS / 'bad_syntax.py'}:3"
    assert "SyntaxError" in err.message


def test_import_error_names_the_import_line():
    err = error_of("bad_import.py")
    assert err.location == f"{SCRIPTS / 'bad_import.py'}:2"
    assert "definitely_not_a_module_gradviz" in err.message


def test_missing_name_is_named():
    err = error_of("bad_missing.py")
    assert "'batch'" in err.message and err.path == str(SCRIPTS / "bad_missing.py")


def test_batch_returning_the_wrong_thing():
    err = error_of("bad_batch.py")
    assert "must return (inputs, targets)" in err.message
    assert err.location == f"{SCRIPTS / 'bad_batch.py'}:4"


def test_forward_exception_points_into_the_model():
    err = error_of("bad_forward.py")
    assert err.code == "forward-error"
    assert err.location == f"{SCRIPTS / 'bad_forward.py'}:10"
    assert "Traceback" in err.details


def test_loss_not_tensor_and_not_scalar():
    err = error_of("bad_item_loss.py")
    assert err.code == "loss-not-tensor" and ".item()" in err.message
    assert err.location == f"{SCRIPTS / 'bad_item_loss.py'}:7"
    err = error_of("bad_vector_loss.py")
    assert err.code == "loss-not-scalar" and "3 elements" in err.message


def test_missing_file():
    with pytest.raises(ScriptError, match="no such script"):
        load_script(SCRIPTS / "nope.py")


def test_script_module_instance_is_copied(tmp_path):
    script = tmp_path / "inst.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(2, 1)\n"
                      "def batch(step):\n    return torch.ones(1, 2), None\n"
                      "def loss_fn(out, t):\n    return out.sum()\n")
    loaded = load_script(script)
    a, b = loaded.new_model(), loaded.new_model()
    assert a is not b and a.weight is not b.weight
