"""The checklist as a registry: declared needs, a verified order, a step that cannot run
becomes ``check-incomplete`` (never a clean bill), ``--fail-on`` and structural-only runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from gradviz.core.diagnosis import CODES, check_report
from gradviz.core.diagnosis import gradcheck as gradcheck_mod
from gradviz.core.diagnosis.base import Check
from gradviz.core.diagnosis.findings import Finding
from gradviz.core.diagnosis.registry import CHECKS, order_problems

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_diagnosis import _cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "samples" / "mlp_digits.py"
FROZEN = ROOT / "samples" / "bugs" / "frozen.py"


def test_registry_order_is_consistent_and_covers_every_code():
    assert order_problems(CHECKS) == []
    given = {c for check in CHECKS for c in check.codes} | {"check-incomplete"}   # the runner gives that one
    assert given == set(CODES)
    # the order is verified, not trusted: reading a code a later check gives is reported
    assert order_problems(list(reversed(CHECKS)))


def test_unknown_need_or_code_is_refused():
    with pytest.raises(ValueError):
        Check("x", ("no-such-code",), lambda ctx: [])
    with pytest.raises(ValueError):
        Check("x", ("frozen",), lambda ctx: [], needs=("moon",))


@pytest.fixture
def oom_in_numerical_check(monkeypatch):
    def boom(*args, **kwargs):
        raise torch.OutOfMemoryError("CPU out of memory: tried to allocate 7.60 GiB")
    monkeypatch.setattr(gradcheck_mod, "check_elements", boom)


def test_oom_inside_the_numerical_check_is_a_finding(oom_in_numerical_check):
    report = check_report(MLP)
    inc = [f for f in report.findings if f.code == "check-incomplete"]
    assert len(inc) == 1 and inc[0].severity == "warning"
    assert inc[0].data["step"] == "numerical gradient check" and inc[0].data["out_of_memory"] is True
    assert "OutOfMemoryError" in inc[0].message and "gradcheck-mismatch" in inc[0].message
    assert not report.complete and report.ok        # no error found, but not a clean bill either


def test_cli_never_says_healthy_when_a_step_did_not_run(oom_in_numerical_check):
    rc, out = _cli(["check", str(MLP)])
    assert rc == 0 and "no problems found" not in out and "INCOMPLETE" in out and "check-incomplete" in out
    rc, out = _cli(["check", str(MLP), "--json", "--fail-on", "warning"])
    doc = json.loads(out)
    assert rc == 1 and doc["complete"] is False and doc["findings"][0]["code"] == "check-incomplete"


def test_fail_on_warning_gates_on_warnings_and_not_on_info():
    assert _cli(["check", str(MLP), "--fail-on", "warning"])[0] == 0
    assert _cli(["check", str(FROZEN), "--fail-on", "warning"])[0] == 0          # frozen is info
    dead = ROOT / "samples" / "bugs" / "dead_relu.py"
    assert _cli(["check", str(dead)])[0] == 0
    assert _cli(["check", str(dead), "--fail-on", "warning"])[0] == 1


def test_a_new_check_is_one_object_in_the_list(monkeypatch):
    def biggest_param(ctx):
        name, p = max(ctx.probe.model.named_parameters(), key=lambda np: np[1].numel())
        return [Finding("frozen", "info", f"largest: {name}", params=[name])]

    extra = Check("largest parameter", ("frozen",), biggest_param, needs=("forward",), values=False)
    monkeypatch.setattr("gradviz.core.diagnosis.registry.CHECKS", CHECKS + [extra])
    report = check_report(MLP, gradcheck=False)
    assert [f.message for f in report.findings] == ["largest: fc1.weight"]


def test_a_failing_check_does_not_stop_the_others(monkeypatch):
    def broken(ctx):
        raise KeyError("bug in a check")

    monkeypatch.setattr("gradviz.core.diagnosis.registry.CHECKS",
                        [Check("broken step", ("frozen",), broken, values=False)] + CHECKS)
    report = check_report(FROZEN, gradcheck=False)
    codes = [f.code for f in report.findings]
    assert "check-incomplete" in codes and "frozen" in codes


def test_structural_run_skips_the_checks_that_need_values():
    report = check_report(MLP, values=False)
    assert report.findings == []
    assert {"gradient norms", "numerical gradient check", "dead ReLUs"} <= set(report.skipped)
    assert not {"reachability", "frozen parameters"} & set(report.skipped)
    assert {c.name for c in CHECKS if not c.values} >= {"reachability", "frozen parameters", "in-place changes"}


def test_an_exception_met_elsewhere_becomes_the_finding_check_gives(tmp_path):
    from gradviz.core.diagnosis import finding_from_exception
    from gradviz.core.script.load import load_script

    script = tmp_path / "broken.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(2, 2)\n\ndef batch(step):\n"
                      "    return torch.ones(1, 3), None\n\ndef loss_fn(out, y):\n    return out.sum()\n")
    ms = load_script(script)
    try:
        ms.compute_loss(ms.new_model(), *ms.get_batch(0))
    except Exception as exc:   # what the window meets while tracing
        f = finding_from_exception(exc, "forward")
    via_check = next(g for g in check_report(script).findings if g.code == "script-error")
    assert (f.code, f.severity, f.message, f.location) == (via_check.code, via_check.severity, via_check.message,
                                                           via_check.location)
    try:
        raise ValueError("plain")
    except ValueError as exc:
        g = finding_from_exception(exc, "forward")
    assert g.code == "script-error" and "ValueError: plain" in g.message
