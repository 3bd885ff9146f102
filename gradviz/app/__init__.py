"""The gradviz desktop window (Qt). Nothing here is imported by ``import gradviz``.

The window is composed of small parts, one job per module: ``document`` (state, no
widgets), ``trace_worker`` (tracing/collapse/layout off the UI thread), ``graph_view``
and ``minimap`` (the drawing), ``outline_panel``, ``inspector_panel``,
``error_panel``, ``search_bar`` (panels), and the window's own parts: ``graph_sync``
(document <-> scene), ``interaction`` (selection, highlight, context menu),
``overlays`` (legend, overview map, theme), ``docks``, ``menus`` (menu bar, toolbar),
``file_actions`` (open, drop, export, copy). ``main_window`` assembles them and
implements the extension contract of ``docs/ARCHITECTURE.md`` as a thin facade.
"""

# PySide6 6.12.0 on Python 3.11 leaks references to None/True/False on every void call;
# ``gradviz.render`` applies the workaround on import, which must happen before any Qt use.
import gradviz.render  # noqa: E402,F401
