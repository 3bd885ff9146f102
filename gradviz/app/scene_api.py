"""The drawing pieces the window uses, all from ``gradviz.render`` (the one renderer
shared with image export)."""
from __future__ import annotations

from gradviz.render import image_export as _image_export
from gradviz.render.legend import ColorBarWidget
from gradviz.render.scene import GraphScene
from gradviz.render.style import layout_graph


def graph_scene_class():
    return GraphScene


def color_bar_class():
    return ColorBarWidget


def image_export():
    return _image_export


def layout_function():
    """``graph -> Layout`` with box sizes that fit the scene's text."""
    return layout_graph


def palette_theme(palette) -> str:
    """'dark' when the system palette's window colour is dark, else 'light'."""
    return "dark" if palette.window().color().lightnessF() < 0.5 else "light"
