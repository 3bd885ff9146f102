"""What a panel may ask of the window: small typed interfaces, one per kind of part.

``MainWindow`` satisfies all of them (``tests/test_window_contract.py`` checks it); a part
is given the window typed as the one interface it needs, and uses nothing else. Nothing
here is optional: a part never probes the window with ``getattr``/``hasattr``.

The rules every part follows (see "Add a panel" in ``docs/ARCHITECTURE.md``):

- Everything a part shows belongs to ``host.document``. On ``documentChanged`` the part
  drops what it showed and shows the new document (usually empty: it was just opened).
- Work started for a document is bound to it: background jobs get ``document=doc``
  (``host.jobs.submit``), results are written into that document (``doc.select``,
  ``doc.mark_edges``, ``doc.set_norms``, ``doc.set_findings``...). A document that is no
  longer current shows nothing of what is written into it, so ids can never cross scripts.
- Per-document state a panel keeps goes in ``doc.part(name, factory)``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from PySide6.QtCore import Qt, SignalInstance
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import QDockWidget, QWidget

from gradviz.app.document import Document
from gradviz.app.jobs import Jobs

__all__ = ["PanelHost", "TrainingHost", "RunsHost", "Opener"]

Opener = Callable[[Path], None]


@runtime_checkable
class PanelHost(Protocol):
    """What every panel gets: the document, its signals, a place for docks, actions and jobs."""

    documentChanged: SignalInstance   # (Document) a new document replaced the old one as a whole
    documentEdited: SignalInstance    # (Document, what, info) the current document changed (see document.py)
    graphChanged: SignalInstance      # (nx.DiGraph) the current document's full graph is known
    graphShown: SignalInstance        # () a (new or re-grouped) view of it is on screen
    nodeSelected: SignalInstance      # (str) the view node in focus, '' when none
    aboutToClose: SignalInstance      # () the window closes: stop threads, save what must be saved
    jobs: Jobs                        # the one background-job helper (lanes, CancelToken)

    @property
    def document(self) -> Document: ...

    def add_dock(self, title: str, widget: QWidget, area: Qt.DockWidgetArea = Qt.RightDockWidgetArea,
                 tabbed: bool = True) -> QDockWidget: ...

    def add_action(self, menu: str, action: QAction, toolbar: bool = False) -> None: ...

    def show_error(self, error: Any, details: str = "", title: str | None = None) -> None: ...

    def show_message(self, text: str, ms: int = 5000) -> None: ...


@runtime_checkable
class TrainingHost(PanelHost, Protocol):
    """Live training also colours the graph with the window's colour scale."""

    def node_color(self, nid: str) -> QColor | None: ...

    def color_range(self) -> tuple[float, float]: ...


@runtime_checkable
class RunsHost(PanelHost, Protocol):
    """Run files are documents too: the runs panel opens them and shows their graphs."""

    def add_opener(self, suffixes: tuple[str, ...], opener: Opener) -> None: ...

    def begin_document(self, path: str | Path, kind: str) -> Document: ...

    def show_graph(self, graph: Any, document: Document) -> None: ...
