"""Open a ``file:line`` location in the system editor; make a link label for it."""
from __future__ import annotations

import html
import re
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QLabel

_LOC = re.compile(r"^(?P<path>.*?)(?::(?P<line>\d+))?$")


def split_location(location: str) -> tuple[str, int | None]:
    m = _LOC.match(location or "")
    if not m:
        return location, None
    return m.group("path"), int(m.group("line")) if m.group("line") else None


def open_location(location: str) -> bool:
    """Open the file of ``file:line`` with the desktop's handler (no line support there)."""
    path, _ = split_location(location)
    if not path or not Path(path).exists():
        return False
    return QDesktopServices.openUrl(QUrl.fromLocalFile(str(Path(path).resolve())))


def short_location(location: str) -> str:
    path, line = split_location(location)
    name = Path(path).name if path else ""
    return f"{name}:{line}" if line else name


class LocationLabel(QLabel):
    """A clickable ``file:line`` (shows the file name, the full path in its tooltip)."""

    activated = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._location = ""
        self.setTextInteractionFlags(Qt.TextBrowserInteraction)
        self.setOpenExternalLinks(False)
        self.linkActivated.connect(self._open)

    def set_location(self, location: str | None) -> None:
        self._location = location or ""
        if not self._location:
            self.setText("—")
            self.setToolTip("")
            return
        self.setText(f'<a href="loc">{html.escape(short_location(self._location))}</a>')
        self.setToolTip(f"{self._location}\nClick to open in the editor")

    def location(self) -> str:
        return self._location

    def _open(self, _href: str) -> None:
        self.activated.emit(self._location)
        open_location(self._location)
