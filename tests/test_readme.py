"""The README's commands are the ones CI runs, and its example script works."""
from __future__ import annotations

import re
from pathlib import Path

import gradviz

ROOT = Path(__file__).resolve().parent.parent


def readme_blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readme_test_command():
    test_command = next(b.strip() for b in readme_blocks("bash") if "pytest" in b)
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def torch_floor() -> str:
    return re.search(r'^\s*"torch>=([0-9.]+)",', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)


def test_ci_tests_the_declared_torch_floor_and_the_readme_states_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pyproject.toml" in ci and 'run_in_fresh_venv floor "$FLOOR"' in ci   # the floor comes from there
    assert not re.search(r"torch==[0-9]", ci)                            # and is written nowhere else
    assert f"`torch>={torch_floor()}`" in (ROOT / "README.md").read_text()


def test_the_readme_names_every_torch_release_ci_tests():
    """#31: the README says which releases CI runs the test command on: the floor, the middle one, the newest."""
    ci = (ROOT / ".ci" / "run").read_text()
    middle = re.search(r"^MIDDLE=([0-9.]+)", ci, flags=re.M).group(1)
    assert 'run_in_fresh_venv middle "$MIDDLE" machine' in ci and "run_in_fresh_venv newest" in ci
    readme = (ROOT / "README.md").read_text()
    command = readme[readme.index("Run the tests"):readme.index('python -m pip install -e ".[test]" && python -m pytest -q')]
    assert middle in command and torch_floor() in command and "newest" in command and "three" in command


def test_readme_example_script_traces(tmp_path):
    example = next(b for b in readme_blocks("python") if "def batch" in b)
    script = tmp_path / "my_model.py"
    script.write_text(example)
    g = gradviz.trace(script)
    assert g.nodes["param:encoder.0.weight"]["grad_norm"] > 0
    assert g.nodes["param:head.bias"]["kind"] == "param"
