"""No display: one line that says so (and which packages Qt lacks), never Qt's abort; --screenshot works anyway."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gradviz.cli.display import XCB_LIBRARIES, display_problem, missing_libraries

ROOT = Path(__file__).resolve().parent.parent
TINY = Path(__file__).parent / "scripts" / "tiny_linear.py"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DISPLAY / xcb are Linux matters")


def headless_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def gradviz(*argv, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradviz", *map(str, argv)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=240)


@linux_only
def test_no_display_is_one_line_naming_what_works(tmp_path):
    proc = gradviz(TINY, env=headless_env(), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("gradviz: cannot open the window: there is no display here")
    assert "--screenshot" in lines[0] and "gradviz export" in lines[0]


@linux_only
def test_a_display_that_does_not_answer(tmp_path):
    proc = gradviz(TINY, env=headless_env(DISPLAY=":187"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("gradviz: cannot open the window: the X display ':187' (DISPLAY) does not "
                                   "answer. Without a display: gradviz --screenshot out.png (drawn offscreen), or "
                                   "the headless commands (gradviz export|check|gradcheck|train ...).")


@linux_only
@pytest.mark.parametrize("display", [None, ":187"])
def test_screenshot_without_a_display_draws_offscreen(tmp_path, display):
    env = headless_env(**({"DISPLAY": display} if display else {}))
    out = tmp_path / "shot.png"
    proc = gradviz(TINY, "--screenshot", out, "--size", "800x600", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    assert "propagateSizeHints" not in proc.stderr      # the offscreen platform's notices are not the user's


def test_missing_libraries_are_named_with_their_packages():
    absent = {"libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
    loads = lambda soname: soname not in absent   # noqa: E731
    assert missing_libraries(loads) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    problem = display_problem({"DISPLAY": ":0"}, loads=loads, answers=lambda d: True)
    if sys.platform.startswith("linux"):
        assert problem == ("Qt's X11 plugin cannot load: libxcb-icccm.so.4, libxcb-keysyms.so.1 not found. "
                           "On Debian/Ubuntu: sudo apt-get install libxcb-icccm4 libxcb-keysyms1 (the README "
                           "lists every library Qt needs)")
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, loads=loads) is None
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, loads=loads) is None


@linux_only
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) reads the plugin's DT_NEEDED")
def test_the_table_covers_what_the_installed_xcb_plugin_needs():
    import PySide6

    qt = Path(PySide6.__file__).parent / "Qt"
    needed = set()
    for binary in (qt / "plugins" / "platforms" / "libqxcb.so", *sorted((qt / "lib").glob("libQt6XcbQpa.so*"))[:1]):
        dump = subprocess.run(["objdump", "-p", str(binary)], capture_output=True, text=True, check=True).stdout
        needed |= {line.split()[1] for line in dump.splitlines() if line.strip().startswith("NEEDED")}
    system = {n for n in needed if not n.startswith(("libQt6", "libicu", "libc.", "libm.", "libgcc", "libstdc",
                                                      "ld-linux", "libpthread", "libdl", "librt"))}
    assert system and system <= set(XCB_LIBRARIES), system - set(XCB_LIBRARIES)


def test_readme_lists_the_packages():
    readme = (ROOT / "README.md").read_text()
    assert all(package in readme for package in set(XCB_LIBRARIES.values()))
