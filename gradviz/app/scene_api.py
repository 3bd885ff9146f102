"""Where the window gets its drawing pieces: ``gradviz.render`` when it is installed,
a bare stand-in (``_basic_scene``) otherwise, so the window works in any build."""
from __future__ import annotations

import importlib


def _optional(module: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise


def graph_scene_class():
    mod = _optional("gradviz.render.scene")
    if mod is None:
        from gradviz.app._basic_scene import GraphScene
        return GraphScene
    return mod.GraphScene


def color_bar_class():
    mod = _optional("gradviz.render.legend")
    return getattr(mod, "ColorBarWidget", None) if mod is not None else None


def image_export():
    return _optional("gradviz.render.image_export")


def layout_function():
    """``graph -> Layout`` with box sizes that fit the scene's text."""
    mod = _optional("gradviz.render.style")
    if mod is not None and hasattr(mod, "layout_graph"):
        return mod.layout_graph
    from gradviz.core.layout import LayoutOptions, layout

    return lambda graph: layout(graph, LayoutOptions())


def palette_theme(palette) -> str:
    """'dark' when the system palette's window colour is dark, else 'light'."""
    return "dark" if palette.window().color().lightnessF() < 0.5 else "light"
