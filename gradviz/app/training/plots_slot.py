"""The Training plots, made the first time they are needed.

pyqtgraph takes 0.3 s to import and the plots 0.1 s to build: at ``MainWindow`` construction
that was on the way from launch to the first graph, for a dock that starts hidden. The slot
makes them when training starts, the dock is shown, or a caller asks for ``widget``; until
then clearing and highlighting have nothing to do.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from PySide6.QtWidgets import QWidget

from gradviz.app.training.history import History

if TYPE_CHECKING:
    from gradviz.app.training.plots import TrainingPlots


class PlotsSlot:
    def __init__(self, history: History, container: QWidget | None = None, plots: TrainingPlots | None = None):
        self.history = history
        self.container = container      # a widget with a layout: the plots dock's body
        self._plots = plots

    @property
    def widget(self) -> TrainingPlots:
        if self._plots is None:
            from gradviz.app.training.plots import TrainingPlots

            self._plots = TrainingPlots(self.history)
            if self.container is not None:
                self.container.layout().addWidget(self._plots)
        return self._plots

    def made(self) -> bool:
        return self._plots is not None

    def clear(self) -> None:
        """A new document: no curves (and nothing to do for plots never made)."""
        if self._plots is not None:
            self._plots.set_names([])
            self._plots.refresh(force=True)

    def refresh(self) -> None:
        if self._plots is not None:
            self._plots.refresh(force=True)

    def stop(self) -> None:
        if self._plots is not None:
            self._plots.timer.stop()

    def follow_selection(self, nid: str, color_of: Callable[[str], object]) -> None:
        """A parameter node selected in the graph: its curves thick, in the node's colour."""
        if self._plots is None:
            return
        name = nid[len("param:"):] if nid.startswith("param:") else None
        if name is not None and self._plots.has_param(name):
            self._plots.highlight(name, color_of(nid))
        else:
            self._plots.highlight(None)

    def recolor(self, color_of: Callable[[str], object]) -> None:
        """Live norms changed the graph's colours: the highlighted curve follows."""
        if self._plots is not None and self._plots.highlighted:
            name = self._plots.highlighted
            self._plots.highlight(name, color_of(f"param:{name}"))
