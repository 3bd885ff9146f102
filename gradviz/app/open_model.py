"""File ▸ Open model…: a model with no script — a callable or a saved torch.export program — in the window.

The dialog asks what ``gradviz PACKAGE.MODULE:CALLABLE --input SHAPE --loss ... --weights FILE``
asks on the command line, shows what gradviz will invent (inputs, loss) as it is typed, and
opens the model script ``gradviz.core.script.generated.model_source`` writes for it: tracing, reload
and recent files are then those of any script. The status bar says what was invented.

Opening a ``.pt2`` file (File ▸ Open, drag and drop, the command line) opens the program with the
example inputs stored in it; a weights file (``.pt``, ``.pth``, ``.safetensors`` ...) gets a
message saying it holds weights, not a model, and how to open it (read from the name only: a
checkpoint of gigabytes is not loaded on the UI thread to say so).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPushButton, QSpinBox, QWidget)

from gradviz.app.contract import Opener, PanelHost
from gradviz.core.script.checkpoints import PROGRAM_SUFFIXES, WEIGHT_SUFFIXES
from gradviz.core.script.factory import Invented, is_callable_spec, parse_config, parse_input, parse_loss
from gradviz.core.script.generated import model_source
from gradviz.core.runtime.errors import ScriptError

log = logging.getLogger(__name__)

__all__ = ["install", "OpenModelDialog", "OpenModelHost", "open_model"]

NOTE_MS = 20000


class OpenModelHost(PanelHost, Protocol):
    """Open a generated script like any other, and route .pt2 / weights files here."""

    def add_opener(self, suffixes: tuple[str, ...], opener: Opener) -> None: ...

    def open_script(self, path: str | Path) -> None: ...


def open_model(host: OpenModelHost, text: str, inputs: list[str] | None = None, loss: str | None = None,
               weights: str | None = None, config: str | None = None) -> bool:
    """Open a callable or a program in the window; say what was invented. False (error shown) if it cannot."""
    try:
        path, note = model_source(text, inputs, loss, weights, config)
    except ScriptError as exc:
        host.show_error(exc, title="Cannot open this model")
        return False
    host.open_script(path)
    if note:
        host.show_message(note, NOTE_MS)
    return True


class OpenModelDialog(QDialog):
    """Callable or program, inputs, loss, weights; a live line saying what will be invented."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open model")
        self.target = QLineEdit(placeholderText="mypkg.models:build   or   /path/to/program.pt2")
        self.inputs = QLineEdit(placeholderText="1,3,224,224   (one per positional input, separated by ;)")
        self.loss = QComboBox()
        self.loss.addItems(["sum", "mean", "ce"])
        self.classes = QSpinBox(minimum=0, maximum=1_000_000, specialValueText="all", toolTip="ce: number of classes")
        self.weights = QLineEdit(placeholderText="optional: a state_dict (.pt, .pth, .safetensors)")
        self.config = QLineEdit(placeholderText="optional: n_layer=2,n_embd=32 (a config class's overrides, "
                                "or the callable's keyword arguments)")
        self.preview = QLabel(wordWrap=True)
        self.preview.setMinimumHeight(3 * self.preview.fontMetrics().lineSpacing())
        self.buttons = QDialogButtonBox(QDialogButtonBox.Open | QDialogButtonBox.Cancel)
        form = QFormLayout(self)
        form.addRow("Callable or program", self._with_browse(self.target, "Program (*.pt2)"))
        form.addRow("Inputs", self.inputs)
        loss_row = QHBoxLayout()
        loss_row.addWidget(self.loss)
        loss_row.addWidget(QLabel("classes"))
        loss_row.addWidget(self.classes)
        form.addRow("Loss", loss_row)
        form.addRow("Config", self.config)
        form.addRow("Weights", self._with_browse(self.weights, "Weights (*.pt *.pth *.bin *.ckpt *.safetensors)"))
        form.addRow(self.preview)
        form.addRow(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        for edit in (self.target, self.inputs, self.weights, self.config):
            edit.textChanged.connect(self.update_preview)
        self.loss.currentTextChanged.connect(self.update_preview)
        self.classes.valueChanged.connect(self.update_preview)
        self.resize(640, 0)
        self.update_preview()

    def _with_browse(self, edit: QLineEdit, file_filter: str) -> QHBoxLayout:
        row = QHBoxLayout()
        row.addWidget(edit)
        button = QPushButton("Browse…")
        button.clicked.connect(lambda: self._browse(edit, file_filter))
        row.addWidget(button)
        return row

    def _browse(self, edit: QLineEdit, file_filter: str) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a file", str(Path.cwd()), file_filter)
        if path:
            edit.setText(path)

    def values(self) -> tuple[str, list[str], str, str | None, str | None]:
        """(callable or program, inputs, loss, weights, config) as the command line takes them."""
        inputs = [part.strip() for part in self.inputs.text().split(";") if part.strip()]
        loss = self.loss.currentText()
        if loss == "ce" and self.classes.value():
            loss = f"ce:{self.classes.value()}"
        return (self.target.text().strip(), inputs, loss, self.weights.text().strip() or None,
                self.config.text().strip() or None)

    def update_preview(self) -> None:
        """Say what will be invented, or what is wrong, as the user types; Open only when it can work."""
        text, inputs, loss, _, config = self.values()
        problem, made = None, None
        try:
            specs, loss_spec = [parse_input(i) for i in inputs], parse_loss(loss)
            overrides = parse_config(config)
            if text.lower().endswith(PROGRAM_SUFFIXES):
                made = Invented(program=text, inputs=specs, loss=loss_spec)
            elif is_callable_spec(text):
                made = Invented(target=text, inputs=specs, loss=loss_spec, config=overrides)
                problem = None if specs else "give the shape of each positional input, e.g. 1,3,224,224"
            else:
                problem = "a callable (mypkg.models:build) or a .pt2 program"
        except ValueError as exc:
            problem = str(exc)
        self.preview.setText(problem if problem else f"gradviz will open {made.note}")
        self.buttons.button(QDialogButtonBox.Open).setEnabled(problem is None)


def open_dialog(host: OpenModelHost) -> None:
    dialog = OpenModelDialog(host if isinstance(host, QWidget) else None)
    if dialog.exec() == QDialog.Accepted:
        open_model(host, *dialog.values())


def refuse_weights(host: OpenModelHost, path: Path) -> None:
    host.show_error(ScriptError(f"{path.name} holds weights, not a model (a {path.suffix} checkpoint): open the "
                                "script or the callable that builds the model, and load the weights with "
                                "File ▸ Open model… (Weights), or on the command line: gradviz my_model.py "
                                f"--weights {path.name}", path=str(path)), title="Weights, not a model")


def install(host: OpenModelHost) -> QAction:
    action = QAction("Open model…", host if isinstance(host, QWidget) else None)
    action.setToolTip("Open a model with no script: PACKAGE.MODULE:CALLABLE and input shapes, or a .pt2 program")
    action.triggered.connect(lambda: open_dialog(host))
    host.add_action("File", action)
    host.add_opener(PROGRAM_SUFFIXES, lambda path: open_model(host, str(path)))
    host.add_opener(WEIGHT_SUFFIXES, lambda path: refuse_weights(host, path))
    host.graphChanged.connect(lambda graph: say_what_was_invented(host, graph))
    return action


def say_what_was_invented(host: OpenModelHost, graph) -> None:
    """Once the model is built the note is complete (the token-id range found in it): say it again."""
    invented, source = graph.graph.get("invented"), graph.graph.get("model_source")
    if invented:
        host.show_message(invented if invented.startswith(f"{source}:") else f"{source}: {invented}", NOTE_MS)
