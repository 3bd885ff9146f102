"""Planted bugs in real models (#13): found with the right code, parameters and line.

Each script in ``samples/bugs/real_*.py`` builds a library model (transformers) and plants one
bug, marked ``# BUG`` on its line. The finding must name that line (not the launcher, not a
library frame, not an intentional mask before it) and the parameters it cuts off.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradviz.core.diagnosis import check_report

ROOT = Path(__file__).resolve().parent.parent
BUGS = ROOT / "samples" / "bugs"


def bug_line(path: Path, marker: str = "# BUG") -> str:
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)
    return f"{path}:{line}"


@pytest.fixture(scope="module")
def found():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = check_report(BUGS / f"{name}.py").findings
        return cache[name]
    return get


def only(findings, code):
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, [(f.code, f.message[:120]) for f in findings]
    return hits[0]


def test_detach_between_resnet_stages(found):
    f = only(found("real_resnet_detach"), "unreachable")
    assert f.location == bug_line(BUGS / "real_resnet_detach.py") and f.data["cut"] == "detach"
    assert all(p.startswith(("resnet.embedder.", "resnet.encoder.stages.0.")) for p in f.params)
    assert any(p.startswith("resnet.embedder.") for p in f.params) and len(f.params) == 9
    assert f.data["from_module"] == "resnet.encoder.stages.0" and f.data["to_module"] == "resnet.encoder.stages.1"
    assert "transformers/models/resnet/modeling_resnet.py" in f.data["library_location"]


def test_bert_pooler_computed_but_unused(found):
    f = only(found("real_bert_pooler"), "unreachable")
    assert sorted(f.params) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    assert f.data["cause"] == "output-unused" and f.location == bug_line(BUGS / "real_bert_pooler.py")


def test_inplace_on_a_saved_tensor_in_gpt2_attention(found):
    f = only(found("real_gpt2_inplace"), "inplace")
    assert f.location == bug_line(BUGS / "real_gpt2_inplace.py")
    assert f.data["inplace_call"] == "mul_" and f.data["saved_by"] == "SoftmaxBackward0"
    assert f.modules == ["transformer.h.1.attn"]       # the layer whose saved output backward met first
    assert "transformers/models/gpt2/modeling_gpt2.py" in f.data["library_location"]


def test_log_of_zero_in_a_cnn(found):
    f = only(found("real_cnn_log0"), "inf")
    assert f.location == bug_line(BUGS / "real_cnn_log0.py") and f.data["op"] == "log" and f.data["inputs_finite"]


def test_softmax_over_a_fully_masked_row(found):
    path = BUGS / "real_masked_softmax.py"
    f = only(found("real_masked_softmax"), "nan")
    assert f.location == bug_line(path) and f.data["op"] == "softmax"      # not the -inf fill before it
    assert f.data["rows"] == [[1]] and f.data["row_count"] == 1
    assert f.data["mask_op"] == "masked_fill" and f.data["mask_intentional"] is True
    assert f.data["mask_location"] == bug_line(path, "# intentional")


def _launcher(launcher: str) -> list[str]:
    """The command that starts gradviz: ``python -m gradviz`` or the console script pip installed."""
    if launcher == "module":
        return [sys.executable, "-m", "gradviz"]
    script = Path(sys.executable).parent / "gradviz"
    if not script.exists():
        pytest.fail(f"the console script {script} is missing: pip install -e . creates it")
    return [str(script)]


@pytest.mark.parametrize("launcher", ["module", "console"])
def test_locations_never_point_at_the_launcher(launcher, tmp_path):
    """Under ``python -m gradviz`` and the ``gradviz`` console script, every op of a library model is
    located in the user's script and in the library's file, never in gradviz or the launcher."""
    exe = _launcher(launcher)
    out = tmp_path / "g.json"
    env = {**os.environ, "GRADVIZ_CORPUS": "resnet", "PYTHONPATH": str(ROOT)}
    subprocess.run(exe + ["export", str(ROOT / "tests" / "corpus" / "zoo.py"), "-o", str(out)], check=True,
                   env=env, capture_output=True, timeout=600)
    nodes = [n for n in json.loads(out.read_text())["nodes"] if n.get("kind") == "op"]
    located = [n for n in nodes if n.get("location")]
    assert len(located) >= 0.9 * len(nodes)
    assert all("/tests/corpus/" in n["location"] for n in located), {n["location"] for n in located}
    libs = {n.get("library_location", "").rpartition(":")[0] for n in located}
    assert any(lib.endswith("transformers/models/resnet/modeling_resnet.py") for lib in libs)
    assert not any("/gradviz/" in lib or lib.endswith("bin/gradviz") for lib in libs)


@pytest.mark.parametrize("launcher", ["module", "console"])
def test_check_findings_never_point_at_the_launcher(launcher):
    """``gradviz check`` through either launcher names the user's bug line, not ``bin/gradviz:8``
    (``sys.exit(main())``) and not an empty location (``python -m gradviz``)."""
    exe = _launcher(launcher)
    path = BUGS / "real_resnet_detach.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(exe + ["check", str(path), "--json", "--no-gradcheck"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr                       # an error finding
    findings = json.loads(proc.stdout)["findings"]
    cuts = [f for f in findings if f["code"] == "unreachable"]
    assert len(cuts) == 1 and cuts[0]["location"] == bug_line(path), findings
    assert all("bin/gradviz" not in (f.get("location") or "") for f in findings)
