"""Hostile scripts and bad command lines: exit 2, one message with file:line, never a traceback.

Each case is a short script a user could write. Run in this process through ``main()`` (the
cases that need real signals and file descriptors are in ``test_hostile_signals.py``).
"""
from __future__ import annotations

import io
import json
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from gradviz.cli.main import main

BASE = '''\
import sys
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        {forward}
        y = self.fc(x)
        {hook}
        return y


def _boom(grad):
    {backward}
    return grad


def model():
    {model}
    return Net()


def batch(step):
    {batch}
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g)


def loss_fn(out, target):
    {loss_fn}
    return nn.functional.cross_entropy(out, target)
{import_}
'''
STAGES = ("import", "model", "batch", "forward", "loss_fn", "backward")
RAISES = {"SystemExit": "sys.exit(3)  # RAISE", "KeyboardInterrupt": "raise KeyboardInterrupt  # RAISE"}
COMMANDS = {"check": ["check", "--json", "--no-gradcheck"], "export": ["export", "-o", "{tmp}/g.json"],
            "gradcheck": ["gradcheck", "--json", "--samples", "2"], "train": ["train", "--steps", "2", "--json"]}


def write_script(folder: Path, stage: str, raise_line: str) -> tuple[Path, int]:
    """A valid script except at ``stage``, where ``raise_line`` runs; returns it and that line's number."""
    fields = {"forward": "pass", "hook": "pass", "backward": "pass", "model": "pass", "batch": "pass",
              "loss_fn": "pass", "import_": ""}
    if stage == "backward":
        fields.update(hook="y.register_hook(_boom)", backward=raise_line)
    elif stage == "import":
        fields["import_"] = raise_line
    else:
        fields[stage.replace("import", "import_")] = raise_line
    path = folder / f"hostile_{stage}.py"
    text = BASE.format(**fields)
    path.write_text(text)
    line = next(i for i, text_line in enumerate(text.splitlines(), 1) if "# RAISE" in text_line)
    return path, line


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        status = main([str(a) for a in argv])
    return status, stdout.getvalue(), stderr.getvalue()


def argv_for(command: str, script: Path, tmp: Path) -> list[str]:
    name, *rest = COMMANDS[command]
    return [name, str(script), *(a.format(tmp=tmp) for a in rest)]


def assert_one_json_object(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if lines and all(line.startswith("{") and line.endswith("}") for line in lines) and len(lines) > 1:
        return json.loads(lines[-1])     # train --json: JSON lines, the last one is the outcome
    return json.loads(stdout)            # raises if anything else is on stdout


@pytest.mark.parametrize("exc", sorted(RAISES))
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_sys_exit_and_keyboard_interrupt_at_every_stage(tmp_path, command, stage, exc):
    script, line = write_script(tmp_path, stage, RAISES[exc])
    status, out, err = run_cli(argv_for(command, script, tmp_path))
    assert status == 2, (out, err)
    assert "Traceback" not in err        # (check's JSON keeps the user's traceback in its "details" data)
    where = f"{script}:{line}"
    if "--json" in COMMANDS[command]:
        doc = assert_one_json_object(out)
        assert doc.get("ok") is False or doc.get("status") not in (None, "ok"), doc
        assert where in json.dumps(doc), doc
    else:
        assert where in err and out == ""
        assert len(err.strip().splitlines()) == 1, err
    assert exc in out + err


def test_model_instance_that_cannot_be_copied(tmp_path):
    script = tmp_path / "locked.py"
    script.write_text(textwrap.dedent('''\
        import threading
        import torch
        from torch import nn
        net = nn.Linear(4, 2)
        net.lock = threading.Lock()
        model = net
        def batch(step):
            return torch.randn(3, 4), None
        def loss_fn(out, target):
            return out.sum()
    '''))
    status, out, err = run_cli(["export", script, "-o", tmp_path / "g.json"])
    assert status == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"{script}:6: `model` is a Linear instance that cannot be copied")
    assert "model = Linear" in err and len(err.strip().splitlines()) == 1
    status, out, _ = run_cli(["check", script, "--json"])
    assert status == 2 and f"{script}:6" in json.loads(out)["findings"][0]["location"]


def test_parameters_on_the_meta_device(tmp_path):
    script = tmp_path / "meta.py"
    script.write_text(textwrap.dedent('''\
        import torch
        from torch import nn
        def model():
            with torch.device("meta"):
                return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        def batch(step):
            return torch.randn(3, 4), None
        def loss_fn(out, target):
            return out.sum()
    '''))
    for command in (["export", script, "-o", tmp_path / "g.svg"], ["gradcheck", script],
                    ["train", script, "--steps", "1"]):
        status, out, err = run_cli(command)
        assert status == 2 and "Traceback" not in err, err
        assert f"{script}:3:" in err and "meta device" in err and "0.weight" in err


@pytest.mark.parametrize("device, says", [("bogus", "is not a device"), ("meta", "no values"),
                                          ("cuda:99", "CUDA" if not torch.cuda.is_available() else "only")])
def test_bad_devices_are_refused_before_the_script_runs(tmp_path, device, says):
    script, _ = write_script(tmp_path, "import", "raise RuntimeError('the script must not run')  # RAISE")
    for command in (["export", script, "-o", tmp_path / "g.json"], ["train", script, "--steps", "1"]):
        status, out, err = run_cli([*command, "--device", device])
        assert status == 2 and out == "" and "Traceback" not in err
        assert err.startswith(f"gradviz {command[0]}: --device {device}") and says in err, err
        assert "must not run" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: --device cuda is valid here")
def test_device_cuda_without_cuda(tmp_path):
    script = Path(__file__).parent / "scripts" / "tiny_linear.py"
    status, out, err = run_cli(["export", script, "-o", tmp_path / "g.json", "--device", "cuda"])
    assert status == 2 and "no CUDA device" in err and "--device cpu" in err and "Traceback" not in err


def test_a_bug_in_gradviz_is_exit_1_with_a_short_message(tmp_path, monkeypatch):
    import operator

    from gradviz.cli import export_cmd

    # a failure raised by gradviz's own code (a C builtin here: no frame of this test file, which would
    # count as user code and make it the script's fault, exit 2)
    monkeypatch.setattr(export_cmd, "run", operator.itemgetter("output"))
    script = Path(__file__).parent / "scripts" / "tiny_linear.py"
    status, out, err = run_cli(["export", script, "-o", tmp_path / "g.json"])
    assert status == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "internal error: TypeError: 'Namespace' object is not subscriptable" in err and "--verbose" in err
    status, out, err = run_cli(["--verbose", "export", script, "-o", tmp_path / "g.json"])
    assert status == 1 and "Traceback (most recent call last)" in err and "gradviz/cli/guard.py" in err


def test_any_gradviz_error_is_exit_2_with_its_message(tmp_path, monkeypatch):
    from gradviz.cli import runs_cmd
    from gradviz.core.runtime.errors import GradvizError

    def refuses(args):
        raise GradvizError("the run file is from a newer gradviz")
    monkeypatch.setattr(runs_cmd, "run", refuses)
    status, out, err = run_cli(["runs", "show", tmp_path / "x.gvrun"])
    assert (status, out) == (2, "") and err.strip() == "gradviz runs: the run file is from a newer gradviz"


def test_timeout_must_be_positive(tmp_path):
    script = Path(__file__).parent / "scripts" / "tiny_linear.py"
    status, _, err = run_cli(["check", script, "--timeout", "0"])
    assert status == 2 and "--timeout must be a positive number" in err


def test_version():
    stdout = io.StringIO()
    with redirect_stdout(stdout), pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    import gradviz
    assert stdout.getvalue().startswith(f"gradviz {gradviz.__version__} (torch {torch.__version__.split('+')[0]}")
