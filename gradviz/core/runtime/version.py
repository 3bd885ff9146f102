"""The version of gradviz (one place; ``gradviz.__version__`` and run files read it)."""
__version__ = "0.1.0"
