"""Light or dark: what the system palette asks for (the scene, legend and panels follow it)."""
from __future__ import annotations


def palette_theme(palette) -> str:
    """'dark' when the palette's window colour is dark, else 'light'."""
    return "dark" if palette.window().color().lightnessF() < 0.5 else "light"
