"""What floats over the graph view: the colour legend (bottom left) and the overview map
(top right), their placement, and the light/dark theme they and the scene follow.

The view is told how many pixels the legend covers (``view.bottom_margin``) so that
Fit keeps every node above it.
"""
from __future__ import annotations

from typing import Callable

from gradviz.app.graph_view import GraphView
from gradviz.app.minimap import Minimap
from gradviz.app.theme import palette_theme
from gradviz.render.export.legend import ColorBarWidget
from gradviz.render.scene.scene import GraphScene

LEGEND_INSET = 12     # px from the viewport's left and bottom edges
LEGEND_GAP = 6        # px kept free between the graph and the legend's top


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
        legend.move(vp.left() + LEGEND_INSET, vp.bottom() - legend.height() - LEGEND_INSET)
        legend.raise_()
        shown = not legend.isHidden()
        self.view.bottom_margin = legend.height() + LEGEND_INSET + LEGEND_GAP if shown else 0
        self.minimap.place()
        self.minimap.raise_()

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
