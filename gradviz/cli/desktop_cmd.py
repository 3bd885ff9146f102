"""``gradviz install-desktop [--uninstall]``: a menu entry and icon for Linux desktops (freedesktop.org).

Writes ``$XDG_DATA_HOME/applications/gradviz.desktop`` (default ``~/.local/share``) whose
``Exec`` is this installation's ``gradviz``, and the icon as
``$XDG_DATA_HOME/icons/hicolor/scalable/apps/gradviz.svg``; ``--uninstall`` removes both.
Exit status: 0 done, 2 a file cannot be written.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path

from gradviz.cli import guard

DESKTOP = """[Desktop Entry]
Type=Application
Name=gradviz
GenericName=Backpropagation debugger
Comment=See and debug backpropagation in PyTorch
Exec={exec} %f
Icon=gradviz
Terminal=false
Categories=Development;Science;
Keywords=pytorch;autograd;gradient;backprop;
"""


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("install-desktop", help="add gradviz to the Linux desktop's application menu",
                       description="Install a .desktop entry and the icon under $XDG_DATA_HOME (~/.local/share).")
    p.add_argument("--uninstall", action="store_true", help="remove them instead")
    return p


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def _exec_line() -> str:
    """This installation's gradviz: the console script beside this Python, else ``python -m gradviz``."""
    script = Path(sys.executable).with_name("gradviz")
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    found = shutil.which("gradviz")
    return shlex.quote(found) if found else f"{shlex.quote(sys.executable)} -m gradviz"


def run(args: argparse.Namespace) -> int:
    from gradviz.core.runtime.atomic import atomic_write
    from gradviz.resources import share

    home = _data_home()
    entry = home / "applications" / "gradviz.desktop"
    icon = home / "icons" / "hicolor" / "scalable" / "apps" / "gradviz.svg"
    if args.uninstall:
        for path in (entry, icon):
            path.unlink(missing_ok=True)
            print(f"removed {path}", file=guard.out())
        return 0
    text = DESKTOP.format(exec=_exec_line())
    svg = share("gradviz.svg").read_bytes()
    for path, write in ((entry, lambda tmp: Path(tmp).write_text(text, encoding="utf-8")),
                        (icon, lambda tmp: Path(tmp).write_bytes(svg))):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, write)
        print(f"wrote {path}", file=guard.out())
    return 0
