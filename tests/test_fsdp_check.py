"""check on sharded models (2 CPU processes, gloo): FSDP2 with a branch forward never calls names that
branch's parameters and why; the numerical gradient check says it did not run; tensor parallelism is clean."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dist_harness import available, run_ranks

pytestmark = pytest.mark.skipif(not available(), reason="torch.distributed with gloo is needed")

SCRIPTS = Path(__file__).parent / "scripts"


def _check_worker(rank: int, world: int, tmp: Path, script: str) -> None:
    from gradviz.core.diagnosis import check_report

    report = check_report(script)
    (tmp / f"report{rank}.json").write_text(json.dumps(report.to_dict()))


def _reports(tmp_path: Path, script: Path) -> list[dict]:
    run_ranks(_check_worker, tmp_path, str(script))
    return [json.loads((tmp_path / f"report{r}.json").read_text()) for r in (0, 1)]


def test_fsdp_unused_branch_is_named(tmp_path):
    script = tmp_path / "fsdp_unused.py"
    script.write_text((SCRIPTS / "fsdp_mlp.py").read_text().replace("UNUSED = False", "UNUSED = True"))
    for report in _reports(tmp_path, script):
        by_code = {f["code"]: f for f in report["findings"]}
        unreachable = by_code["unreachable"]
        assert unreachable["params"] == ["branch.weight", "branch.bias"]
        assert unreachable["data"]["cause"] == "never-called"             # not "runs, output unused"
        assert "`branch` (Linear) is never called" in unreachable["message"]
        defined = 1 + next(i for i, line in enumerate(script.read_text().splitlines()) if "self.branch =" in line)
        assert unreachable["location"] == f"{script}:{defined}"              # where it is defined
        gradcheck = by_code["check-incomplete"]
        assert gradcheck["data"]["step"] == "numerical gradient check"
        assert "sharded model" in gradcheck["message"] and "unsharded, in one process" in gradcheck["message"]
        assert not report["complete"] and not report["ok"]
        assert set(by_code) == {"unreachable", "check-incomplete"}, report["findings"]


def test_fsdp_and_tensor_parallel_models_are_otherwise_clean(tmp_path):
    for name in ("fsdp_mlp.py", "tp_mlp.py"):
        run_ranks(_check_worker, tmp_path, str(SCRIPTS / name))
        for rank in (0, 1):
            report = json.loads((tmp_path / f"report{rank}.json").read_text())
            assert [f["code"] for f in report["findings"]] == ["check-incomplete"], (name, report["findings"])
            assert report["nodes"] > 10
