"""The command as a process's entry holds the cycle collector while gradviz starts (frozen and back on
before the user's code runs) and skips the interpreter's last garbage collection (gc.freeze); called
from Python with arguments (tests, notebooks) it leaves the collector alone."""
import gc
import json
import sys

from test_app_support import MLP

from gradviz.cli.main import main


def test_the_process_entry_freezes_the_heap_after_the_command_ran(tmp_path, monkeypatch):
    out = tmp_path / "g.json"
    monkeypatch.setattr(sys, "argv", ["gradviz", "export", str(MLP), "-o", str(out)])
    before = gc.get_freeze_count()
    try:
        assert main() == 0
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()          # this test process goes on collecting
    assert json.loads(out.read_text())["nodes"]          # the command did its work first


def test_a_call_with_arguments_does_not_freeze(tmp_path):
    out = tmp_path / "g.json"
    before = gc.get_freeze_count()
    assert main(["export", str(MLP), "-o", str(out)]) == 0
    assert gc.get_freeze_count() == before


SPY = """\
import gc, json, sys
sys.path.insert(0, {folder!r})
with open({log!r}, "a") as f:
    f.write(json.dumps({{"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}}) + "\\n")
from tiny_linear import model, batch, loss_fn
"""


def _spy(tmp_path):
    from pathlib import Path

    log = tmp_path / "gc.jsonl"
    script = tmp_path / "spy.py"
    script.write_text(SPY.format(folder=str(Path(__file__).parent / "scripts"), log=str(log)))
    return script, log


def test_the_users_code_runs_after_start_up_was_frozen_and_with_the_collector_on(tmp_path, monkeypatch):
    script, log = _spy(tmp_path)
    monkeypatch.setattr(sys, "argv", ["gradviz", "train", str(script), "--steps", "2"])
    before = gc.get_freeze_count()
    try:
        assert main() == 0
        seen = [json.loads(line) for line in log.read_text().splitlines()]
        assert seen and all(s["enabled"] for s in seen)          # train: the user's code is collected as usual
        assert all(s["frozen"] > before for s in seen)           # gradviz's start-up was frozen before it ran
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_failing_command_still_hands_the_collector_back(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gradviz", "export", str(tmp_path / "missing.py"), "-o", str(tmp_path / "g.json")])
    try:
        assert main() == 2
        assert gc.isenabled()
    finally:
        gc.unfreeze()


def test_a_call_with_arguments_never_holds_the_collector(tmp_path):
    script, log = _spy(tmp_path)
    before = gc.get_freeze_count()
    assert main(["train", str(script), "--steps", "2"]) == 0
    assert json.loads(log.read_text().splitlines()[0]) == {"enabled": True, "frozen": before}
