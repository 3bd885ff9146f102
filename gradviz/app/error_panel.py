"""The error dock: message, clickable ``file:line`` and the traceback.

Errors from loading or tracing a script land here (the previous graph stays on
screen); so do uncaught exceptions, through the ``sys.excepthook`` installed by
``install_excepthook``.
"""
from __future__ import annotations

import sys
import traceback

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from gradviz.app.formatting import alarm_css
from gradviz.app.theme import palette_theme
from gradviz.app.source_link import LocationLabel


def describe(error) -> tuple[str, str | None, str, str]:
    """(message, location, code-line, details) of an exception or a message string."""
    if isinstance(error, str):
        return error, None, "", ""
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    if not hasattr(error, "message"):
        message = f"{type(error).__name__}: {message}"
    location = getattr(error, "location", None)
    details = getattr(error, "details", "") or ""
    if not details and error.__traceback__ is not None:
        details = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    code_line = ""
    path, line = getattr(error, "path", None), getattr(error, "line", None)
    if path and line:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for i, text in enumerate(f, 1):
                    if i == line:
                        code_line = text.rstrip()
                        break
        except OSError:
            pass
    return message, location, code_line, details


class ErrorPanel(QWidget):
    dismissed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("errorPanel")
        mono = QFontDatabase.systemFont(QFontDatabase.FixedFont)
        self.title = QLabel()
        self.title.setObjectName("errorTitle")
        self.title.setStyleSheet(alarm_css(palette_theme(self.palette())))
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.location = LocationLabel()
        self.code = QLabel()
        self.code.setFont(mono)
        self.code.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.library = LocationLabel()       # the library frame under the user's line, when there is one
        self.library_row = QWidget()
        beside = QHBoxLayout(self.library_row)
        beside.setContentsMargins(0, 0, 0, 0)
        beside.addWidget(QLabel("in library"))
        beside.addWidget(self.library, 1)
        self.library_row.hide()
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.details.setFont(mono)
        self.details.setLineWrapMode(QPlainTextEdit.NoWrap)
        dismiss = QPushButton("Dismiss")
        dismiss.clicked.connect(self.dismissed.emit)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(dismiss)
        where = QHBoxLayout()
        where.addWidget(QLabel("at"))
        where.addWidget(self.location)
        where.addWidget(self.code, 1)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.message)
        lay.addLayout(where)
        lay.addWidget(self.library_row)
        lay.addWidget(self.details, 1)
        self._error = None

    def show_error(self, error, details: str = "", title: str | None = None) -> None:
        message, location, code_line, own = describe(error)
        self._error = error
        code = getattr(error, "code", None)
        self.title.setText(title or ("Script error" + (f" ({code})" if code else "")))
        self.message.setText(message)
        self.location.set_location(location)
        self.code.setText(code_line.strip())
        library = getattr(error, "library_location", None)
        self.library.set_location(library)
        self.library_row.setVisible(bool(library))
        self.details.setPlainText((own or details).rstrip())

    def error(self):
        return self._error

    def text(self) -> str:
        library = self.library.location() if self.library_row.isVisibleTo(self) else ""
        return "\n".join([self.title.text(), self.message.text(), self.location.location(), library,
                          self.details.toPlainText()])


class ExceptHook(QObject):
    """Routes uncaught exceptions (e.g. in slots) to the window instead of aborting."""

    caught = Signal(object, str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._previous = None

    def install(self) -> None:
        self._previous = sys.excepthook
        sys.excepthook = self._hook

    def uninstall(self) -> None:
        if self._previous is not None and sys.excepthook == self._hook:
            sys.excepthook = self._previous
        self._previous = None

    def _hook(self, etype, value, tb) -> None:
        if issubclass(etype, KeyboardInterrupt):
            (self._previous or sys.__excepthook__)(etype, value, tb)
            return
        text = "".join(traceback.format_exception(etype, value, tb))
        sys.stderr.write(text)
        self.caught.emit(value, text)
