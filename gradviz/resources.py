"""Files that ship inside the package: the samples, the icon, the desktop entry's template.

In a wheel the samples are ``gradviz/samples/`` (``setup.py`` copies the repository's
``samples/`` there when it builds); in a checkout (an editable install) they are the
repository's ``samples/`` beside the package. Both are found the same way here.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["samples_dir", "sample", "share"]

PACKAGE = Path(__file__).resolve().parent


def samples_dir() -> Path | None:
    """The folder of the built-in samples (None when neither place has them)."""
    for folder in (PACKAGE / "samples", PACKAGE.parent / "samples"):
        if (folder / "mlp_digits.py").is_file():
            return folder
    return None


def sample(name: str) -> Path | None:
    """A built-in sample by name (``mlp_digits``, ``cnn``, ``transformer``, ``bugs/detach``...), or None."""
    folder = samples_dir()
    path = folder / f"{name}.py" if folder is not None else None
    return path if path is not None and path.is_file() else None


def share(name: str) -> Path:
    """A data file of the package (``gradviz.svg``)."""
    return PACKAGE / "share" / name
