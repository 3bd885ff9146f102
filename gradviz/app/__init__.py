"""The gradviz desktop window (Qt). Nothing here is imported by ``import gradviz``.

``main_window`` creates every part; ``contract`` declares what a panel may ask of it;
``document`` is the state of the open script; ``session`` opens documents and runs the
trace/layout jobs of ``jobs`` (the one background-job helper). See "The window" in
``docs/ARCHITECTURE.md``.
"""
