"""Notice when the open script changes on disk, and offer to reload it (never silently).

Editors often replace a file instead of writing it (the watch is then lost), and
write in bursts: the path is re-added after each change and the notice is debounced.
"""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton


class ScriptWatcher(QObject):
    changed = Signal(str)

    def __init__(self, parent=None, debounce_ms: int = 400) -> None:
        super().__init__(parent)
        self._watcher = QFileSystemWatcher(self)
        self._watcher.fileChanged.connect(self._on_change)
        self._path: str | None = None
        self._timer = QTimer(self, singleShot=True, interval=debounce_ms, timeout=self._fire)

    def watch(self, path: str | Path | None) -> None:
        files = self._watcher.files()
        if files:
            self._watcher.removePaths(files)
        self._path = str(Path(path).resolve()) if path else None
        self._timer.stop()
        if self._path and Path(self._path).exists():
            self._watcher.addPath(self._path)

    def path(self) -> str | None:
        return self._path

    def _on_change(self, _path: str) -> None:
        self._timer.start()

    def _fire(self) -> None:
        if not self._path:
            return
        if Path(self._path).exists() and self._path not in self._watcher.files():
            self._watcher.addPath(self._path)  # replaced by the editor: watch the new file
        self.changed.emit(self._path)


class ReloadBar(QFrame):
    """A slim, non-modal bar above the graph: "script changed on disk — Reload"."""

    reload = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("reloadBar")
        self.setFrameShape(QFrame.NoFrame)
        self.setAutoFillBackground(True)
        self.setStyleSheet("#reloadBar { background: palette(highlight); }"
                           "#reloadBar QLabel { color: palette(highlighted-text); }")
        self.label = QLabel()
        button = QPushButton("Reload")
        button.setDefault(True)
        button.clicked.connect(self._reload)
        dismiss = QToolButton(text="✕", autoRaise=True, toolTip="Dismiss")
        dismiss.clicked.connect(self.hide)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 4, 6, 4)
        lay.addWidget(self.label, 1)
        lay.addWidget(button)
        lay.addWidget(dismiss, 0, Qt.AlignRight)
        self.hide()

    def notify(self, path: str) -> None:
        self.label.setText(f"{Path(path).name} changed on disk — reload to trace it again.")
        self.show()

    def _reload(self) -> None:
        self.hide()
        self.reload.emit()
