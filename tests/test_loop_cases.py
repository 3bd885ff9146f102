"""The loop doctor on loops reproduced from public reports (tests/loop_cases/, each names its source), run
unmodified through ``gradviz run`` in this process: the bug gives its finding, the fixed version none."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradviz.cli.main import main
from gradviz.core.record.loading import summarize
from gradviz.core.record.reader import open_ranks

CASES = Path(__file__).parent / "loop_cases"

# case -> the finding its bug must give (the fixed version, FIXED=1, must give no loop finding)
BUGS = {
    "rnn_hidden_no_detach": "graph-reused",
    "running_loss_graph": "graph-kept-alive",
    "zero_grad_once": "grad-not-cleared",
    "frozen_after_optimizer": "frozen-but-updated",
    "frozen_stale_grad_adam": "frozen-but-updated",
    "grad_accumulation_not_divided": "grad-accumulation",
    "scheduler_before_optimizer": "lr-schedule",
    "optimizer_over_last_layer": "not-in-optimizer",
    "warmup_lr_zero": "lr-zero",
    "labels_shuffled_apart": "loss-flat",
    "metric_tensor_kept": "memory-growing",
}
LOOP_CODES = {"grad-not-cleared", "grad-accumulation", "graph-kept-alive", "graph-reused", "frozen-but-updated",
              "not-in-optimizer", "lr-zero", "lr-schedule", "loss-flat", "memory-growing", "loop-exception"}


def record(tmp_path, monkeypatch, case: str, fixed: bool, *extra: str) -> tuple[int, list[dict], dict]:
    monkeypatch.setenv("FIXED", "1" if fixed else "0")
    out = tmp_path / f"{case}{int(fixed)}.gvrun"
    status = main(["run", "-o", str(out), *extra, str(CASES / f"{case}.py")])
    info = summarize(open_ranks(out))
    return status, info["findings"], info["ranks"][0]


@pytest.mark.parametrize("case", sorted(BUGS))
def test_bug_found_and_fix_clean(tmp_path, monkeypatch, case):
    status, found, rank = record(tmp_path, monkeypatch, case, fixed=False)
    codes = {f["code"] for f in found}
    assert BUGS[case] in codes, found
    f = next(f for f in found if f["code"] == BUGS[case])
    assert "Fix:" in f["message"] and f["data"]["step"] is not None
    status_fixed, found_fixed, rank_fixed = record(tmp_path, monkeypatch, case, fixed=True)
    assert status_fixed == 0
    assert not [f for f in found_fixed if f["code"] in LOOP_CODES], found_fixed
    assert rank_fixed["steps"] >= 6
    assert rank["steps"] >= 1


def test_rnn_crash_is_a_finding_with_the_carried_input_and_its_line(tmp_path, monkeypatch):
    status, found, rank = record(tmp_path, monkeypatch, "rnn_hidden_no_detach", fixed=False)
    assert status == 1                                      # the script raised torch's "second time" error
    reused = next(f for f in found if f["code"] == "graph-reused")
    assert reused["data"]["crashed"] and reused["data"]["from_step"] == 0
    assert reused["location"].endswith("rnn_hidden_no_detach.py:31")      # pred, h = model(x, h)
    crash = next(f for f in found if f["code"] == "loop-exception")
    assert "second time" in crash["message"] and crash["location"].endswith(":33")   # loss.backward()
    assert rank["steps"] == 1                                # step 0 recorded; step 1 never reached opt.step()


def test_zero_grad_once_names_every_parameter(tmp_path, monkeypatch):
    _, found, _ = record(tmp_path, monkeypatch, "zero_grad_once", fixed=False)
    f = next(f for f in found if f["code"] == "grad-not-cleared")
    assert set(f["params"]) == {"0.weight", "0.bias", "2.weight", "2.bias"} and f["data"]["step"] == 1
    assert f["location"].endswith("zero_grad_once.py:18")          # the loss.backward() that adds to them


def test_frozen_is_not_called_vanishing(tmp_path, monkeypatch):
    _, found, _ = record(tmp_path, monkeypatch, "frozen_after_optimizer", fixed=False)
    f = next(f for f in found if f["code"] == "frozen-but-updated")
    assert set(f["params"]) == {"0.weight", "0.bias"} and f["data"]["step"] == 3
    assert all(f["code"] != "run-vanishing" or not set(f["params"]) & {"0.weight", "0.bias"} for f in found)


def test_steps_stops_cleanly_and_the_scripts_finally_runs(tmp_path, monkeypatch):
    script = tmp_path / "loop_forever.py"
    marker = tmp_path / "cleaned"
    script.write_text(
        "import torch\nfrom torch import nn\nm = nn.Linear(3, 1)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "try:\n    while True:\n        opt.zero_grad()\n        m(torch.randn(4, 3)).pow(2).mean().backward()\n"
        f"        opt.step()\nfinally:\n    open({str(marker)!r}, 'w').write('ok')\n")
    out = tmp_path / "f.gvrun"
    assert main(["run", "-o", str(out), "--steps", "7", str(script)]) == 0
    assert marker.read_text() == "ok"
    info = summarize(open_ranks(out))
    assert info["ranks"][0]["steps"] == 7 and info["ranks"][0]["status"] == "closed"


def test_gan_two_optimizers_healthy_and_the_choice_stated(tmp_path, monkeypatch):
    """pytorch/examples dcgan's loop: G's backward adds to D's gradients after D's step (D zeroes them before
    its own next step): not grad-not-cleared; D's two backwards are not accumulation of one loss."""
    status, found, rank = record(tmp_path, monkeypatch, "dcgan_loop", fixed=False)
    assert status == 0
    assert not [f for f in found if f["code"] in LOOP_CODES - {"grad-accumulation"}], found
    with open_ranks(tmp_path / "dcgan_loop0.gvrun")[0] as r:
        models = r.meta["loop_models"]
    assert [m["optimizer"] for m in models] == ["Adam", "Adam"] and [m["recorded"] for m in models] == [True, False]
    assert rank["steps"] == 15


def test_graph_carried_from_a_later_checked_step_is_named(tmp_path, monkeypatch):
    """rnn_hidden_no_detach's bug (forum t/6795) beginning mid-run, past the always-checked first steps: in
    steady state the step after a checked one walks its backward instead of hooking every module's forward;
    the carried graph is still found before torch's error, and the next forward names its carrier."""
    script = tmp_path / "late_carry.py"
    script.write_text(
        "import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.cell = nn.RNNCell(4, 8)\n        self.out = nn.Linear(8, 1)\n"
        "    def forward(self, x, h):\n        h = self.cell(x, h)\n        return self.out(h), h\n"
        "model = Model()\nopt = torch.optim.SGD(model.parameters(), lr=0.01)\nh = torch.zeros(2, 8)\n"
        "for step in range(30):\n    x = torch.randn(2, 4)\n    if step < 11:\n        h = h.detach()\n"
        "    opt.zero_grad()\n    pred, h = model(x, h)\n    pred.pow(2).mean().backward(retain_graph=True)\n"
        "    opt.step()\n")
    out = tmp_path / "late.gvrun"
    assert main(["run", "-o", str(out), str(script)]) == 1
    found = summarize(open_ranks(out))["findings"]
    f = next(f for f in found if f["code"] == "graph-reused")
    assert f["data"]["carried"]["module"] == "Model" and f["data"]["carried"]["argument"] == 2
    assert f["data"]["from_step"] >= 10 and f["location"].endswith("late_carry.py:20")  # pred, h = model(x, h)
