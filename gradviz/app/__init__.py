"""The gradviz desktop window (Qt). Nothing here is imported by ``import gradviz``.

The window is composed of small parts, one job per module: ``document`` (state, no
widgets), ``trace_worker`` (tracing/collapse/layout off the UI thread), ``graph_view``
and ``minimap`` (the drawing), ``outline_panel``, ``inspector_panel``,
``error_panel``, ``search_bar`` (panels), ``file_actions`` (menus: open, recent,
export, watch) and ``main_window`` which assembles them and implements the extension
contract of ``docs/ARCHITECTURE.md``.
"""

# PySide6 6.12 on Python 3.11 leaks references to None/True/False on every void call;
# ``gradviz.render`` applies the workaround on import, which must happen before any Qt use.
try:
    import gradviz.render  # noqa: F401
except ModuleNotFoundError as _exc:  # a build without the render package: apply it directly
    if _exc.name not in ("gradviz.render",):
        raise
