"""The command as a process's entry skips the interpreter's last garbage collection (gc.freeze);
called from Python with arguments (tests, notebooks) it leaves the collector alone."""
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
