"""The report corpus (tests/reports/) through ``gradviz check --json`` on two source trees: before/after.

    python benchmarks/reports_before_after.py BEFORE_TREE [AFTER_TREE]

For each case, the buggy version is "right" when a finding has the expected code at the ``# BUG`` line
(for a healthy case: no error or warning and a complete report), and the fixed version
(GRADVIZ_REPORT_FIXED=1) is "clean" when it has no error or warning and is complete. Each tree runs in
a fresh process from a neutral directory, with that tree first on PYTHONPATH. Prints a Markdown table.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPORTS = Path(__file__).resolve().parent.parent / "tests" / "reports"


def expectation(path: Path) -> dict:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXPECT" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


def source(path: Path) -> str:
    head = path.read_text().split('"""')[1]
    return head.split("Source:")[1].split("(")[0].strip().rstrip(",") if "Source:" in head else "?"


def check(tree: str, path: Path, expect: dict, fixed: bool) -> dict | None:
    cmd = [sys.executable, "-m", "gradviz", "check", "--json", str(path)]
    if expect.get("steps"):
        cmd += ["--steps", str(expect["steps"])]
    if not expect.get("gradcheck"):
        cmd.append("--no-gradcheck")
    env = {**os.environ, "PYTHONPATH": tree, "GRADVIZ_REPORT_FIXED": "1" if fixed else "0"}
    with tempfile.TemporaryDirectory() as cwd:
        run = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError:
        return None


def loud(report: dict) -> list:
    return [f for f in report["findings"] if f["severity"] in ("error", "warning")]


def judge(tree: str, path: Path) -> tuple[bool, bool]:
    expect = expectation(path)
    bug = check(tree, path, expect, False)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "# BUG" in t) \
        if "# BUG" in path.read_text() else None
    if bug is None:
        right = False
    elif expect.get("code") is None:
        right = bug["complete"] and not loud(bug)
    else:
        right = any(f["code"] == expect["code"] and f["location"] == f"{path}:{line}" for f in bug["findings"])
    if expect.get("code") is None:
        return right, right
    fixed = check(tree, path, expect, True)
    return right, fixed is not None and fixed["complete"] and not loud(fixed)


def main() -> None:
    before = sys.argv[1]
    after = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parent.parent)
    rows, totals = [], [0, 0, 0, 0]
    cases = sorted(p for p in REPORTS.glob("*.py") if not p.name.startswith("_"))
    for path in cases:
        b = judge(before, path)
        a = judge(after, path)
        for i, v in enumerate(b + a):
            totals[i] += v
        mark = lambda v: "yes" if v else "no"   # noqa: E731
        rows.append(f"| {path.stem} | {source(path)} | {mark(b[0])} | {mark(b[1])} | {mark(a[0])} | {mark(a[1])} |")
    print("| case | source | before: found right | before: fixed clean | after: found right | after: fixed clean |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    n = len(cases)
    print(f"| total ({n}) | | {totals[0]} | {totals[1]} | {totals[2]} | {totals[3]} |")


if __name__ == "__main__":
    main()
