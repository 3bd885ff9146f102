"""No code from a ``.pt2``, on the torch this runs on (CI runs it on 2.6, 2.14.1 and the newest).

``tests/evil_pt2.py`` writes, with this torch, clean programs and booby-trapped ones: a ``__reduce__``
payload in the sample inputs, a ``use_pickle`` weight or constant, ``opaque_obj_`` / ``custom_obj_``
constants, legacy pickled members, Python in a symbolic expression, in ``guards_code``, in a graph input's
name, a quote in a buffer name, ``torch.os.system`` as a node target, pytree specs that import a module,
an AOTInductor ``.so`` (``torch.export.load`` dlopens it). Each payload appends its case to a marker file
and returns the real value (a vulnerable loader goes on as if nothing happened). The marker must stay
empty through loading, ``module()`` and a forward; every trapped archive is refused in one message
naming the member; every clean one is the same program ``torch.export.load`` gives (torch is the oracle).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gradviz.core.runtime.errors import ScriptError
from gradviz.core.script.checkpoints import load_program

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pt2")
    marker = folder / "marker"
    marker.write_text("")
    # in a fresh interpreter: torch.export traces imports, and this one's Qt import hooks (pytest-qt) trip 2.6
    subprocess.run([sys.executable, str(Path(__file__).with_name("evil_pt2.py")), str(folder / "cases"),
                    str(marker)], check=True, capture_output=True, timeout=600)
    manifest = json.loads((folder / "cases" / "manifest.json").read_text())["cases"]
    assert marker.read_text() == ""
    return folder / "cases", marker, manifest


def _cases(manifest: dict, kind: str) -> list[str]:
    def trap(info):
        return info["trap"] or ""
    if kind == "clean":
        return [c for c, i in manifest.items() if i["trap"] is None]
    if kind == "named":
        return [c for c, i in manifest.items() if trap(i) == "file name"]
    if kind == "broken":
        return [c for c, i in manifest.items() if trap(i).startswith("broken")]
    return [c for c, i in manifest.items() if i["trap"] and trap(i) not in ("file name",)
            and not trap(i).startswith("broken")]


def _run(program) -> None:
    """module() and a forward on the stored inputs: the stages where the rest of torch's traps fire."""
    module = program.module()
    example = program.example_inputs
    args = example[0] if example else (torch.randn(4, 3),)
    module(*args)


def test_no_payload_runs_and_each_trap_is_refused_naming_its_member(archives, monkeypatch):
    folder, marker, manifest = archives
    monkeypatch.syspath_prepend(str(folder))        # treespec_import's module is importable, as from a cwd
    trapped = _cases(manifest, "trapped")
    assert len(trapped) >= (8 if torch.__version__ < "2.7" else 20)
    for case in trapped:
        sys.modules.pop("gv_evil_mod", None)
        if manifest[case]["trap"].startswith("native"):      # the AOTInductor .so: never opened, the program runs
            _run(load_program(folder / manifest[case]["file"]))
            assert marker.read_text() == "", case
            continue
        with pytest.raises(ScriptError) as info:
            _run(load_program(folder / manifest[case]["file"]))
        message = str(info.value)
        assert "cannot load the torch.export program" in message and "\n" not in message, (case, message)
        assert re.search(r"(models/model\.json|serialized_\w+\.(json|pt)|data/\w+/\w+)", message), (case, message)
        assert marker.read_text() == "", (case, marker.read_text())
    assert "gv_evil_mod" not in sys.modules


def test_clean_programs_are_torchs_own(archives):
    folder, marker, manifest = archives
    for case in _cases(manifest, "clean"):
        path = folder / manifest[case]["file"]
        ours, theirs = load_program(path), torch.export.load(str(path))   # torch is the oracle on clean files
        assert ours.graph_module.code == theirs.graph_module.code, case
        assert str(ours.graph_signature) == str(theirs.graph_signature), case
        assert ours.state_dict.keys() == theirs.state_dict.keys(), case
        for name, value in theirs.state_dict.items():
            assert torch.equal(ours.state_dict[name], value), (case, name)
            assert type(ours.state_dict[name]) is type(value), (case, name)
        assert ours.constants.keys() == theirs.constants.keys(), case
        example = theirs.example_inputs
        if example:
            args = example[0]
            assert all(torch.equal(a, b) for a, b in zip(ours.example_inputs[0], args)), case
            assert torch.equal(ours.module()(*args), theirs.module()(*args)), case
    assert marker.read_text() == ""


def test_broken_archives_are_one_line_refusals(archives):
    folder, marker, manifest = archives
    broken = _cases(manifest, "broken")
    assert {"truncated", "empty", "notzip", "broken_json", "missing_model"} <= set(broken)
    for case in broken:
        with pytest.raises(ScriptError) as info:
            load_program(folder / manifest[case]["file"])
        assert "\n" not in str(info.value) and "Traceback" not in str(info.value), case


def test_gradviz_check_refuses_a_trapped_program_and_runs_nothing(archives, tmp_path):
    """The whole command, as a user runs it: exit 2, one line naming the member, no marker."""
    folder, marker, manifest = archives
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADVIZ_NATIVE": "0", "GRADVIZ_CACHE": str(tmp_path / "cache")}
    trapped = "sample_inputs" if "sample_inputs" in manifest else "old_sample_inputs"
    for case, extra in ((trapped, []), ("clean", [])):
        proc = subprocess.run([sys.executable, "-m", "gradviz", "check", str(folder / manifest[case]["file"]),
                               "--json", "--no-gradcheck", *extra], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=300)
        doc = json.loads(proc.stdout)
        if case == "clean":
            assert proc.returncode in (0, 1) and doc["findings"] is not None, proc.stderr
        else:
            assert proc.returncode == 2 and doc["ok"] is False and "Traceback" not in proc.stderr
            assert "sample_inputs" in doc["error"] and "eval" in doc["error"]
            # the note of what gradviz invents, then the refusal (newest torch's triton may add its own
            # "nanobind: leaked" lines at interpreter exit)
            lines = [line for line in proc.stderr.splitlines() if line.startswith("gradviz")]
            assert len(lines) == 2 and lines[-1].startswith("gradviz check: "), proc.stderr
    assert marker.read_text() == ""


def test_gradviz_opens_programs_only_through_its_own_reader():
    """``torch.export.load`` and ``torch.load`` without ``weights_only=True`` appear nowhere in gradviz:
    the one door stays the one door."""
    found = []
    for path in (ROOT / "gradviz").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"export\.load\(|pickle\.loads?\(|torch\.load\(", text):
            line = text.count("\n", 0, m.start()) + 1
            call = text[m.start():m.start() + 240]
            if m.group().startswith("torch.load") and "weights_only=True" in call:
                continue
            found.append(f"{path.relative_to(ROOT)}:{line}: {call.splitlines()[0]}")
    assert found == []
