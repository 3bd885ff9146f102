"""gradviz installs like a real package: the wheel carries what it needs; --version; a desktop entry.

(CI, ``.ci/run``, also installs the wheel in a fresh virtual environment, not editable, and runs
``gradviz --version``, ``gradviz export`` on a packaged sample and ``gradviz --screenshot`` there.)
"""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gradviz
from gradviz.resources import sample, samples_dir, share

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("gradviz", "samples", "setup.py", "pyproject.toml", "README.md", "MANIFEST.in")


def gradviz_cli(*argv, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradviz", *map(str, argv)], capture_output=True, text=True,
                          timeout=240, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel ``pip wheel`` builds from a copy of the sources (the checkout gets no build/ folder)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
        else:
            shutil.copy(source, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("gradviz-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_carries_samples_data_icon_and_native_source(wheel):
    names = set(wheel.namelist())
    for needed in ("gradviz/samples/mlp_digits.py", "gradviz/samples/_digits.py", "gradviz/samples/data/digits.npz",
                   "gradviz/samples/data/DIGITS_LICENSE.md", "gradviz/samples/bugs/detach.py",
                   "gradviz/share/gradviz.svg", "gradviz/core/native/gradviz_native.cpp", "gradviz/py.typed",
                   "gradviz/cli/main.py", "gradviz/app/launch.py", "gradviz/integrations/huggingface.py"):
        assert needed in names, needed
    assert not any(n.startswith(("tests/", "samples/")) or "__pycache__" in n for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "gradviz = gradviz.cli.supervisor:entry" in wheel.read(entry_points).decode()
    metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {gradviz.__version__}" in metadata and "Requires-Dist: torch>=" in metadata


def test_samples_are_found_in_a_checkout():
    assert samples_dir() == ROOT / "samples"
    assert sample("mlp_digits") == ROOT / "samples" / "mlp_digits.py"
    assert sample("bugs/detach") == ROOT / "samples" / "bugs" / "detach.py" and sample("nope") is None
    assert share("gradviz.svg").read_text().lstrip().startswith("<?xml")


def test_version():
    proc = gradviz_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith(f"gradviz {gradviz.__version__} (torch ")


def test_install_desktop_writes_an_entry_and_icon_and_removes_them(tmp_path):
    proc = gradviz_cli("install-desktop", env={"XDG_DATA_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    entry = tmp_path / "applications" / "gradviz.desktop"
    icon = tmp_path / "icons" / "hicolor" / "scalable" / "apps" / "gradviz.svg"
    assert proc.stdout.splitlines() == [f"wrote {entry}", f"wrote {icon}"]
    desktop = configparser.ConfigParser(interpolation=None)
    desktop.optionxform = str
    desktop.read(entry)
    section = desktop["Desktop Entry"]
    assert section["Type"] == "Application" and section["Icon"] == "gradviz" and section["Name"] == "gradviz"
    program = section["Exec"].split()[0]
    assert section["Exec"].endswith(" %f") and (shutil.which(program) or program == sys.executable)
    assert icon.read_bytes() == share("gradviz.svg").read_bytes()
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    proc = gradviz_cli("install-desktop", "--uninstall", env={"XDG_DATA_HOME": str(tmp_path)})
    assert proc.returncode == 0 and not entry.exists() and not icon.exists()
