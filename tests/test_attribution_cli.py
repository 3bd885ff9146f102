"""``gradviz attribute``: JSON schema, PNG, report, errors with exit 2, no Qt for JSON."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from gradviz.cli.main import main
from tests.conftest import ROOT, SAMPLES

TINY = ROOT / "tests" / "scripts" / "tiny_linear.py"


def test_json_output_matches_the_issue_schema(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["attribute", str(SAMPLES / "mlp_digits.py"), "--steps", "32", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {"method", "target", "inputs", "completeness"} <= set(data)
    assert data["method"] == "ig" and data["target"] == "loss"
    entry = data["inputs"][0]
    assert entry["shape"] == [64, 64]
    assert np.array(entry["attribution"]).shape == (64, 64)
    c = data["completeness"]
    assert {"attribution_sum", "output_delta", "rel_error"} <= set(c)
    assert c["rel_error"] < 0.01 and c["ok"] is True
    assert sum(np.array(entry["attribution"]).ravel()) == pytest.approx(c["attribution_sum"], rel=1e-9)
    assert "wrote" in capsys.readouterr().out


def test_failed_completeness_is_reported_not_hidden(tmp_path, capsys):
    # two quadrature points cannot integrate a ReLU network's gradient: the check must say so
    out = tmp_path / "a.json"
    assert main(["attribute", str(SAMPLES / "mlp_digits.py"), "--steps", "2", "-o", str(out)]) == 0
    c = json.loads(out.read_text())["completeness"]
    assert c["ok"] is False and c["rel_error"] > 0.01
    assert "completeness fails" in capsys.readouterr().err


def test_saliency_json_for_token_ids(tmp_path):
    out = tmp_path / "s.json"
    assert main(["attribute", str(SAMPLES / "transformer.py"), "--method", "saliency", "--target", "3",
                 "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    entry = data["inputs"][0]
    assert data["completeness"] is None and entry["kind"] == "tokens" and entry["through"] == "tok_emb"
    assert np.array(entry["attribution"]).shape == (8, 32)


def test_png_output(tmp_path):
    out = tmp_path / "a.png"
    assert main(["attribute", str(SAMPLES / "cnn.py"), "--steps", "8", "--example", "all", "-o", str(out)]) == 0
    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert not img.isNull() and img.width() >= 1000 and img.height() > 300


def test_report_without_output(capsys):
    assert main(["attribute", str(TINY), "--method", "grad-x-input"]) == 0
    text = capsys.readouterr().out
    assert "Gradient × input" in text and "input 0" in text


@pytest.mark.parametrize("argv, message", [
    (["--target", "best"], "--target takes"),
    (["--target", "9"], "out of range"),
    (["-o", "x.txt"], "unknown extension"),
    (["-o", "/no/such/folder/a.json"], "does not exist"),
    (["--baseline", "nothing-here"], "neither 'zeros'"),
    (["--example", "first"], "--example takes"),
    (["--baseline", str(TINY)], "cannot read the baseline file"),
])
def test_bad_options_exit_2(argv, message, capsys):
    assert main(["attribute", str(TINY), *argv]) == 2
    assert message in capsys.readouterr().err


def test_broken_script_exit_2_with_file_line(capsys):
    bad = ROOT / "tests" / "scripts" / "bad_forward.py"
    assert main(["attribute", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:10" in err and "Traceback" not in err


def test_baseline_file(tmp_path):
    base = tmp_path / "b.npy"
    np.save(base, np.full((1,), 2.0, dtype=np.float32))     # the input itself: nothing to attribute
    out = tmp_path / "a.json"
    assert main(["attribute", str(TINY), "--baseline", str(base), "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["inputs"][0]["attribution"] == [0.0] and data["completeness"]["output_delta"] == 0.0


def test_json_export_loads_no_qt(tmp_path):
    out = tmp_path / "a.json"
    code = ("import sys; from gradviz.cli.main import main; "
            f"rc = main(['attribute', {str(TINY)!r}, '-o', {str(out)!r}]); "
            "assert rc == 0, rc; bad = [m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cpu_threads_leave_one_core_free_while_attributing(tmp_path, monkeypatch):
    import torch

    import gradviz.core.attribution.attribute as attribution
    from gradviz.core.runtime.devices import training_threads

    seen = []
    real = attribution.attribute
    monkeypatch.setattr(attribution, "attribute", lambda *a, **k: (seen.append(torch.get_num_threads()),
                                                                   real(*a, **k))[1])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(max(2, before))
        assert main(["attribute", str(TINY), "-o", str(tmp_path / "a.json")]) == 0
        assert seen == [training_threads()]                 # the policy of gradviz train and the window
        assert torch.get_num_threads() == max(2, before)    # and put back: in-process callers keep theirs
    finally:
        torch.set_num_threads(before)
