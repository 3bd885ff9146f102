"""What floats over the graph view: the colour legend (bottom left) and the overview map
(top right), their placement, and the light/dark theme they and the scene follow.

The view is told how many pixels the legend covers (``view.bottom_margin``) so that
Fit keeps every node above it.
"""
from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QGraphicsOpacityEffect, QWidget

from gradviz.app.graph_view import GraphView
from gradviz.app.minimap import Minimap
from gradviz.app.theme import palette_theme
from gradviz.render.export.legend import ColorBarWidget
from gradviz.render.scene.scene import GraphScene

LEGEND_INSET = 12     # px from the viewport's left and bottom edges
LEGEND_GAP = 6        # px kept free between the graph and the legend's top
FADED = 0.18          # opacity of an overlay that has no free corner left: the node under it shows


def free_corner(size, corners: list[QPoint], keep: list[QRect]) -> QPoint | None:
    """The first of ``corners`` (top-left points) where a box of ``size`` covers none of ``keep``."""
    for at in corners:
        if not any(QRect(at, size).intersects(k) for k in keep):
            return at
    return None


def set_faded(widget: QWidget, faded: bool) -> None:
    """Fade an overlay (and let clicks through to the graph) or show it whole."""
    effect = widget.graphicsEffect()
    if faded:
        if not isinstance(effect, QGraphicsOpacityEffect):
            effect = QGraphicsOpacityEffect(widget)
            widget.setGraphicsEffect(effect)
        effect.setOpacity(FADED)
    elif effect is not None:
        widget.setGraphicsEffect(None)
    widget.setAttribute(Qt.WA_TransparentForMouseEvents, faded)
    widget.faded = faded


class Overlays:
    def __init__(self, view: GraphView, scene: GraphScene, minimap: Minimap, theme: str) -> None:
        self.view = view
        self.scene = scene
        self.minimap = minimap
        self.theme = theme
        self.legend = ColorBarWidget(view, theme=theme, key=False)
        self.legend.setObjectName("legend")
        scene.colorScaleChanged.connect(self.legend.set_scale)
        scene.marksChanged.connect(lambda styles: (self.legend.set_marks(styles), self.place()))
        self.legend_wanted = True     # View > Legend
        # the scene rectangles overlays must never cover: the selected node(s), a finding's nodes
        self.protected: Callable[[], list] = lambda: []
        self.view.viewportMoved.connect(self.place)
        self.place()

    def place(self) -> None:
        """Put the legend and the map in their corners; the legend shows only over a graph (a colour
        bar over an empty canvas, at launch or after a failed open, explains nothing)."""
        vp = self.view.viewport().geometry()
        legend = self.legend
        graph = self.scene.graph
        legend.setVisible(self.legend_wanted and graph is not None and graph.number_of_nodes() > 0)
        legend.set_max_width(vp.width() - 2 * LEGEND_INSET)     # mark entries wrap: none cut at the edge
        legend.resize(legend.sizeHint())
        keep = self._protected_rects()
        inset = LEGEND_INSET
        corners = [QPoint(vp.left() + inset, vp.bottom() - legend.height() - inset),
                   QPoint(vp.right() - legend.width() - inset, vp.bottom() - legend.height() - inset),
                   QPoint(vp.left() + inset, vp.top() + inset)]
        at = free_corner(legend.size(), corners, keep)
        legend.move(at or corners[0])
        set_faded(legend, at is None)
        legend.raise_()
        shown = not legend.isHidden()
        self.view.bottom_margin = legend.height() + LEGEND_INSET + LEGEND_GAP if shown else 0
        self.minimap.place()
        mm = self.minimap
        if keep:
            taken = keep + ([legend.geometry()] if shown else [])
            corners = [mm.pos(), QPoint(vp.left() + 12, vp.top() + 12),
                       QPoint(vp.left() + 12, vp.bottom() - mm.height() - 12),
                       QPoint(vp.right() - mm.width() - 12, vp.bottom() - mm.height() - 12)]
            spot = free_corner(mm.size(), corners, taken)
            mm.move(spot or corners[0])
            set_faded(mm, spot is None)
        else:
            set_faded(mm, False)
        self.minimap.raise_()

    def _protected_rects(self) -> list[QRect]:
        """The protected scene rectangles in viewport-parent coordinates (where the overlays live)."""
        vp = self.view.viewport()
        out = []
        for rect in self.protected():
            if rect.isNull():
                continue
            poly = self.view.mapFromScene(rect).boundingRect()
            out.append(poly.translated(vp.geometry().topLeft()).adjusted(-4, -4, 4, 4))
        return out

    def set_legend_visible(self, on: bool) -> None:
        self.legend_wanted = on
        self.place()

    def set_minimap_visible(self, on: bool) -> None:
        self.minimap.wanted = on
        self.minimap.refresh()
        if not on:
            self.minimap.hide()

    def follow_palette(self, palette, also: Callable[[], None] | None = None) -> None:
        """After a palette change: switch scene, legend and map (and ``also``) to a light or dark theme."""
        theme = palette_theme(palette)
        if theme == self.theme:
            return
        self.theme = theme
        self.scene.set_theme(theme)
        self.legend.set_theme(theme)
        if also is not None:
            also()
        self.minimap.render_scene()
