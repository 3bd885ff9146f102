"""What floats over the graph view: the colour legend (bottom left) and the overview map
(bottom right), their placement, and the light/dark theme they and the scene follow.

The view is told how many pixels the legend covers (``view.bottom_margin``) so that
Fit keeps every node above it.
"""
from __future__ import annotations

from gradviz.app.theme import palette_theme
from gradviz.render.legend import ColorBarWidget

LEGEND_INSET = 12     # px from the viewport's left and bottom edges
LEGEND_GAP = 6        # px kept free between the graph and the legend's top


class Overlays:
    def __init__(self, window) -> None:
        self.window = window
        self.view = window.view
        self.minimap = window.minimap
        self.legend = self._make_legend()
        self.view.viewportMoved.connect(self.place)

    def _make_legend(self):
        win = self.window
        legend = ColorBarWidget(self.view, theme=win.theme, key=False)
        legend.setObjectName("legend")
        win.scene.colorScaleChanged.connect(legend.set_scale)
        win.scene.marksChanged.connect(lambda styles: (legend.set_marks(styles), self.place()))
        legend.show()
        return legend

    def place(self) -> None:
        vp = self.view.viewport().geometry()
        legend = self.legend
        if legend is not None:
            legend.resize(legend.sizeHint())
            legend.move(vp.left() + LEGEND_INSET, vp.bottom() - legend.height() - LEGEND_INSET)
            legend.raise_()
            shown = not legend.isHidden()
            self.view.bottom_margin = legend.height() + LEGEND_INSET + LEGEND_GAP if shown else 0
        self.minimap.place()
        self.minimap.raise_()

    def set_legend_visible(self, on: bool) -> None:
        self.legend.setVisible(on)
        self.place()

    def set_minimap_visible(self, on: bool) -> None:
        self.minimap.wanted = on
        self.minimap.refresh()
        if not on:
            self.minimap.hide()

    def follow_palette(self) -> None:
        """After a palette change: switch scene, legend, histogram and map to a light or dark theme."""
        win = self.window
        theme = palette_theme(win.palette())
        if theme == win.theme:
            return
        win.theme = theme
        win.scene.set_theme(theme)
        self.legend.set_theme(theme)
        win.inspector.histogram.apply_palette()
        self.minimap.render_scene()
