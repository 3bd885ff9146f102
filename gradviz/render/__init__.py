"""Qt drawing shared by the window and image export: ``GraphScene``, legend, image export."""
