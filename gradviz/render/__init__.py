"""Qt drawing shared by the window and image export: ``GraphScene``, legend, image export.

Importing this package applies ``qtcompat.protect_singletons()`` first: the installed
PySide6 6.12 drops a reference to None/True/False on every call of a void (or bool
signal) binding when run on Python 3.11, which kills the interpreter after a few
thousand calls ("none_dealloc"). Import ``gradviz.render`` (or call the function)
before using Qt anywhere in the app.
"""
from gradviz.render.qtcompat import protect_singletons

protect_singletons()
