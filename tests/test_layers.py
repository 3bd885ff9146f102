"""The layers hold: import-linter's contracts (pyproject.toml), no import circle, and Qt stays out of headless use.

core imports neither render, app nor Qt (lazy imports inside functions count too); render
does not import app; the engine's rooms and render's rooms are layers (gradviz/core/__init__.py,
gradviz/render/__init__.py); no module reaches itself through imports. `import gradviz`, the API
and every CLI command that is not the app never load Qt: checked in a fresh interpreter, where
nothing else has imported it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).parent / "scripts"
QT_MODULES = ("PySide6", "shiboken6", "pyqtgraph")

LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_import_contracts_hold():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 kept, 0 broken" in proc.stdout


def test_the_contract_catches_a_lazy_qt_import_in_core(tmp_path):
    """The contract is real: one function-level `import PySide6` in core breaks it."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "gradviz", copy / "gradviz", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    with (copy / "gradviz" / "core" / "layout" / "grouping.py").open("a") as f:
        f.write("\n\ndef _sneaky():\n    from PySide6 import QtCore  # noqa: F401\n")
    proc = lint(copy)
    assert proc.returncode != 0
    assert "BROKEN" in proc.stdout and "gradviz.core.layout.grouping -> PySide6" in proc.stdout


def test_the_render_contract_catches_an_upward_import(tmp_path):
    """render's rooms are layers: a function-level import from primitives up to parts (the one style.layout_graph
    had before frame_nesting moved down) breaks the contract."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "gradviz", copy / "gradviz", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    with (copy / "gradviz" / "render" / "primitives" / "style.py").open("a") as f:
        f.write("\n\ndef _sneaky():\n    from gradviz.render.parts.frames import FrameItem  # noqa: F401\n")
    proc = lint(copy)
    assert proc.returncode != 0
    assert "BROKEN" in proc.stdout and "gradviz.render.primitives.style -> gradviz.render.parts.frames" in proc.stdout


def qt_modules_after(code: str, *argv: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; the Qt modules loaded when it finished."""
    probe = (f"import sys\n{code}\n"
             f"print('QT:', sorted(m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("QT:")]
    assert lines, proc.stdout + proc.stderr
    return eval(lines[-1][3:])


def test_import_gradviz_and_the_api_do_not_load_qt():
    code = ("import gradviz\ng = gradviz.trace(sys.argv[1])\nsmall = gradviz.collapse(g, depth=1)\n"
            "gradviz.layout(small)\nassert g.number_of_nodes() > 0")
    assert qt_modules_after(code, str(SCRIPTS / "tiny_linear.py")) == []


def test_headless_cli_commands_do_not_load_qt(tmp_path):
    script = str(SCRIPTS / "tiny_linear.py")
    commands = [["export", script, "-o", str(tmp_path / "g.json")], ["export", script, "-o", str(tmp_path / "g.dot")],
                ["check", script, "--no-gradcheck"], ["gradcheck", script, "--samples", "2"],
                ["train", script, "--steps", "2"], ["native", "status"], ["--version"], ["check", "--help"]]
    code = ("from gradviz.cli.main import main\nimport contextlib\n"
            f"for argv in {commands!r}:\n"
            "    with contextlib.suppress(SystemExit):\n"
            "        rc = main(argv)\n"
            "        assert rc in (0, 1), (argv, rc)\n")
    assert qt_modules_after(code) == []


def import_circles(root: Path, package: str = "gradviz") -> list[list[str]]:
    """Every import circle among ``package``'s modules (strongly connected components of two or more),
    from grimp's graph, the one import-linter reads: module-level, function-level and TYPE_CHECKING
    imports alike, since a circle through a lazy import is still a circle of dependencies."""
    code = ("import json, grimp, networkx as nx\n"
            f"g = grimp.build_graph({package!r}, cache_dir=None)\n"
            "d = nx.DiGraph([(m, t) for m in g.modules for t in g.find_modules_directly_imported_by(m)])\n"
            "print(json.dumps(sorted(sorted(c) for c in nx.strongly_connected_components(d) if len(c) > 1)))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_no_import_circles_anywhere_in_gradviz():
    """No module of gradviz reaches itself through imports (#23), render included."""
    circles = import_circles(ROOT)
    assert circles == [], circles


def test_the_circle_check_sees_a_lazy_import_circle(tmp_path):
    """The check is real: one function-level import from a low room back up to a higher one is a circle."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "gradviz", copy / "gradviz", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    with (copy / "gradviz" / "core" / "runtime" / "formatting.py").open("a") as f:
        f.write("\n\ndef _sneaky():\n    from gradviz.core.trace import tracer  # noqa: F401\n")
    circles = import_circles(copy)
    assert any("gradviz.core.runtime.formatting" in c and "gradviz.core.trace.tracer" in c for c in circles)
