"""File ▸ Open recent: the last ten scripts, kept in QSettings across restarts."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu

KEY = "recentFiles"
MAX_RECENT = 10


class RecentFiles(QObject):
    chosen = Signal(str)

    def __init__(self, menu: QMenu, settings: QSettings | None = None, parent=None) -> None:
        super().__init__(parent)
        self.menu = menu
        self.settings = settings or QSettings()
        menu.aboutToShow.connect(self.rebuild)
        self.rebuild()

    def paths(self) -> list[str]:
        """Recent paths, newest first; files that no longer exist are dropped (and forgotten)."""
        raw = self.settings.value(KEY, [])
        if isinstance(raw, str):
            raw = [raw]
        paths = [str(p) for p in (raw or []) if p]
        alive = [p for p in paths if Path(p).is_file()][:MAX_RECENT]
        if alive != paths:
            self.settings.setValue(KEY, alive)
        return alive

    def add(self, path: str | Path) -> None:
        path = str(Path(path).resolve())
        paths = [path] + [p for p in self.paths() if p != path]
        self.settings.setValue(KEY, paths[:MAX_RECENT])
        self.settings.sync()
        self.rebuild()

    def clear(self) -> None:
        self.settings.setValue(KEY, [])
        self.rebuild()

    def rebuild(self) -> None:
        self.menu.clear()
        paths = self.paths()
        for i, p in enumerate(paths):
            label = f"&{(i + 1) % 10}  {Path(p).name}   —   {Path(p).parent}"
            action = QAction(label, self.menu)
            action.setToolTip(p)
            action.triggered.connect(lambda _=False, p=p: self.chosen.emit(p))
            self.menu.addAction(action)
        if not paths:
            empty = self.menu.addAction("(no recent scripts)")
            empty.setEnabled(False)
        else:
            self.menu.addSeparator()
            self.menu.addAction("Clear list", self.clear)
