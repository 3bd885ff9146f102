"""Dock panels of the window: adding them (``add_dock`` of the contract), tabbing panels
that share an area, the Errors dock, and default sizes that leave the graph most of the
space."""
from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow, QScrollArea, QWidget

MAX_BOTTOM_MIN_H = 180   # bottom panels taller than this scroll instead of shrinking the graph
SIDE_SHARE = 0.5         # the side panels together take at most this share of the window's width


class Docks:
    """The window's docks, in the order they were added."""

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.docks: list[QDockWidget] = []
        self.error_dock: QDockWidget | None = None   # never tabbed in front of the others
        self.panels_menu = None                      # View ▸ Panels once the menus exist
        self.side_widths: dict[QDockWidget, int] = {}  # default widths of the side panels
        self._bottom_open = False                    # a panel of the bottom area is in view

    def add(self, title: str, widget: QWidget, area=Qt.RightDockWidgetArea, tabbed: bool = True) -> QDockWidget:
        """A dock in ``area``: tabbed with the area's first panel, or (``tabbed=False``) below it,
        so that both stay in view. A bottom panel starts hidden (its menu action shows it): at
        launch the graph has the window's whole height, whatever panels are installed."""
        win = self.window
        dock = QDockWidget(title, win)
        dock.setObjectName(f"dock-{title}")
        horizontal = area in (Qt.BottomDockWidgetArea, Qt.TopDockWidgetArea)
        if horizontal and widget.minimumSizeHint().height() > MAX_BOTTOM_MIN_H:
            # a tall panel must not push the graph away: let it scroll inside a shorter dock
            scroller = QScrollArea()
            scroller.setObjectName(f"scroll-{title}")
            scroller.setWidgetResizable(True)
            scroller.setFrameShape(QScrollArea.NoFrame)
            scroller.setWidget(widget)
            dock.setWidget(scroller)
        else:
            dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable
                         | QDockWidget.DockWidgetClosable)
        win.addDockWidget(area, dock)
        if horizontal:
            dock.hide()
            # checked once the show/hide/tab switch is over (a tab switch hides one dock, shows another)
            dock.visibilityChanged.connect(lambda _on: QTimer.singleShot(0, self.window, self._bottom_changed))
        same = [d for d in self.docks if win.dockWidgetArea(d) == area and not d.isFloating()
                and d is not self.error_dock]
        if same and not tabbed:
            win.splitDockWidget(same[0], dock, Qt.Vertical)
        elif same:
            win.tabifyDockWidget(same[0], dock)
            # the first shown panel of an area stays in front (a hidden one cannot be)
            first = next((d for d in same if not d.isHidden()), dock)
            first.raise_()
        self.docks.append(dock)
        if self.panels_menu is not None:
            self.panels_menu.addAction(dock.toggleViewAction())
        return dock

    def add_error_dock(self, widget: QWidget) -> QDockWidget:
        """The Errors dock: bottom, hidden until an error comes, never tabbed with the others."""
        win = self.window
        dock = QDockWidget("Errors", win)
        dock.setObjectName("dock-Errors")
        dock.setWidget(widget)
        win.addDockWidget(Qt.BottomDockWidgetArea, dock)
        dock.hide()
        self.docks.append(dock)
        self.error_dock = dock
        return dock

    def in_area(self, area) -> list[QDockWidget]:
        win = self.window
        return [d for d in self.docks if win.dockWidgetArea(d) == area and d.isVisible() and not d.isFloating()]

    def bottom_height(self) -> int:
        """The bottom area's height when it opens: a quarter of the window, 160-240 px."""
        return max(160, min(240, self.window.height() // 4))

    def _bottom_changed(self) -> None:
        """The bottom area opening (its first panel shown) gets the default height: Qt would give
        it half the window (seen: the training plots took 370 of 940 px, the graph drawn at 0.33).
        A tab switch or a second panel keeps the height the user chose."""
        bottom = [d for d in self.in_area(Qt.BottomDockWidgetArea) if d is not self.error_dock]
        opened = bool(bottom) and not self._bottom_open
        self._bottom_open = bool(bottom)
        if opened and self.window.isVisible():
            self.window.resizeDocks(bottom[:1], [self.bottom_height()], Qt.Vertical)

    def apply_default_sizes(self) -> None:
        """Side panels about 300 px wide (less in a narrow window), the bottom area at most a
        quarter of the window: the graph keeps most of the space."""
        win = self.window
        side = [d for d in self.side_widths if d.isVisible()]
        if side:
            wanted = [self.side_widths[d] for d in side]
            scale = min(1.0, SIDE_SHARE * win.width() / max(1, sum(wanted)))
            win.resizeDocks(side, [int(w * scale) for w in wanted], Qt.Horizontal)
        bottom = self.in_area(Qt.BottomDockWidgetArea)
        if bottom:
            win.resizeDocks(bottom[:1], [self.bottom_height()], Qt.Vertical)

    def show_error_dock(self) -> None:
        """Show the Errors dock in front, a third of the window high at most when it opens."""
        dock, win = self.error_dock, self.window
        was_hidden = not dock.isVisible()
        dock.show()
        dock.raise_()
        if was_hidden and win.isVisible():
            win.resizeDocks([dock], [max(180, min(260, win.height() // 3))], Qt.Vertical)
