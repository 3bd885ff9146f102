"""Real training scripts nobody here wrote, run unmodified through ``gradviz run`` (in this process):
pytorch/examples' word_language_model (tests/examples/word_language_model/SOURCE.md). Its
``repackage_hidden`` is the fix for ``graph-reused``: the same script with that one line removed must get
the finding (and torch's "second time" error recorded as the loop's exception), the original none."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gradviz.cli.main import main
from gradviz.core.record.loading import summarize
from gradviz.core.record.reader import open_ranks

WLM = Path(__file__).parent / "examples" / "word_language_model"
DETACH = "            hidden = repackage_hidden(hidden)\n            output, hidden = model(data, hidden)\n"


@pytest.fixture
def fresh_modules():
    """The example imports its own ``data`` and ``model`` modules: each run gets its folder's."""
    yield
    for name in ("data", "model"):
        sys.modules.pop(name, None)


def _run(script: Path, out: Path, tmp_path: Path, steps: int = 12) -> tuple[int, dict]:
    args = ["--data", str(WLM / "data" / "wikitext-2"), "--epochs", "1", "--emsize", "16", "--nhid", "16",
            "--bptt", "10", "--batch_size", "4", "--save", str(tmp_path / "model.pt"), "--use-optimizer",
            "--lr", "0.005", "--log-interval", "1000"]
    status = main(["run", "-o", str(out), "--steps", str(steps), "--every", "5", str(script), *args])
    return status, summarize(open_ranks(out))


def test_word_language_model_records_clean(tmp_path, fresh_modules):
    status, info = _run(WLM / "main.py", tmp_path / "wlm.gvrun", tmp_path)
    assert status == 0
    rank = info["ranks"][0]
    assert rank["steps"] == 12 and rank["model_class"].endswith("RNNModel")
    assert rank["node_steps"] >= 2                    # node norms at the sampled steps (0, 5, 10)
    assert info["findings"] == [], info["findings"]


def test_word_language_model_without_repackage_hidden_is_graph_reused(tmp_path, fresh_modules):
    source = (WLM / "main.py").read_text()
    assert DETACH in source                          # the example's own fix, as shipped
    for name in ("model.py", "data.py"):
        (tmp_path / name).write_text((WLM / name).read_text())
    broken = tmp_path / "main.py"
    broken.write_text(source.replace(DETACH, "            output, hidden = model(data, hidden)\n"))
    status, info = _run(broken, tmp_path / "broken.gvrun", tmp_path)
    assert status == 1                               # torch's "backward through the graph a second time"
    codes = {f["code"]: f for f in info["findings"]}
    reused = codes["graph-reused"]
    assert reused["data"]["carried"]["module"] == "RNNModel" and reused["data"]["carried"]["argument"] == 2
    assert reused["location"] == f"{broken}:{source[:source.index(DETACH)].count(chr(10)) + 1}"
    assert "loop-exception" in codes and info["ranks"][0]["steps"] == 1


def test_a_loop_without_an_optimizer_is_told_it_was_not_recorded(tmp_path, capsys):
    """pytorch/examples regression (tests/examples/regression/SOURCE.md) steps its parameters by hand:
    `gradviz run` finds no optimizer to follow, and says so in one line with the way to record it,
    exiting 1 — an unrecorded run is never passed off as a healthy one ("findings: none", exit 0)."""
    script = Path(__file__).parent / "examples" / "regression" / "main.py"
    assert "param.data.add_" in script.read_text() and "optim" not in script.read_text()
    status = main(["run", "-o", str(tmp_path / "reg.gvrun"), str(script)])
    err = capsys.readouterr().err
    assert status == 1
    (line,) = [ln for ln in err.splitlines() if ln.startswith("gradviz run: no torch.optim optimizer")]
    assert "backward pass(es) ran" in line and "gradviz.watch(model)" in line
