"""No skip hides a missing file or a missing required package: a missing sample fails its test.

A skip is honest when it names a machine without something optional (CUDA, a compiler);
it is not when the thing skipped for is part of gradviz or one of its declared
dependencies, or is a file of this repository — then the skip hides a broken checkout.
"""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# gradviz itself and what pyproject.toml requires (dependencies and the test extra)
REQUIRED = {"gradviz", "torch", "numpy", "networkx", "PySide6", "shiboken6", "pyqtgraph", "pytest", "pytestqt",
            "importlinter", "nbclient", "nbformat", "ipykernel", "transformers", "pytorch_lightning", "accelerate",
            "safetensors", "hypothesis"}
FILE_CHECKS = ("exists", "is_file", "is_dir", "isfile", "isdir")


def _is_pytest_call(node: ast.AST, *names: str) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr in names
            and isinstance(func.value, (ast.Name, ast.Attribute)))


def _checks_a_file(expr: ast.AST) -> bool:
    """A check for a file of the repository (a system path such as /proc is a platform check)."""
    nodes = list(ast.walk(expr))
    if any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("/") for n in nodes):
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in FILE_CHECKS
               for n in nodes)


def dishonest_skips(source: str) -> list[tuple[int, str]]:
    """``(line, why)`` for each skip in ``source`` that hides a missing file or required package."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if _is_pytest_call(node, "importorskip") and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).split(".")[0] in REQUIRED:
                found.append((node.lineno, f"importorskip({node.args[0].value!r}): a required package"))
        if _is_pytest_call(node, "skipif") and node.args and _checks_a_file(node.args[0]):
            found.append((node.lineno, "skipif on a file check"))
        if isinstance(node, ast.If) and _checks_a_file(node.test):
            for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if _is_pytest_call(inner, "skip"):
                    found.append((inner.lineno, "skip when a file is missing"))
    return found


def test_the_detector_sees_each_dishonest_form():
    bad = ("import pytest\npytest.importorskip('gradviz.render.export.image_export')\n"
           "@pytest.mark.skipif(not (ROOT / 'x.py').exists(), reason='x')\ndef test_a(): pass\n"
           "def test_b():\n    if not path.is_file():\n        pytest.skip('sample not written yet')\n")
    assert [line for line, _ in dishonest_skips(bad)] == [2, 3, 7]
    honest = ("import pytest\npytest.importorskip('torchvision')\n"
              "@pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA')\ndef test_c(): pass\n"
              "@pytest.mark.skipif(not Path('/proc/self/status').exists(), reason='needs /proc')\ndef test_d(): pass\n")
    assert dishonest_skips(honest) == []


def test_no_test_skips_over_a_missing_file_or_required_package():
    offenders = [f"{path.name}:{line}: {why}" for path in sorted([*TESTS.glob("test_*.py"), TESTS / "conftest.py"])
                 if path.name != Path(__file__).name
                 for line, why in dishonest_skips(path.read_text(encoding="utf-8"))]
    assert offenders == []
