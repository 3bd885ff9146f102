"""Record a training loop into a run file and read it back (no Qt here).

    from gradviz.core.record import watch, open_run, RecordError

Writing: ``recorder`` (``watch``) -> ``rows``/``sampling`` -> ``writer`` (``commits`` in the background;
``lock``: one writer per run file; ``losses``, ``model_follow``: what ``w.step`` accepts and follows).
Reading flows one way: ``reader`` (``validate``: the file is untrusted input) -> ``loading`` -> ``rundata.RunData`` -> ``analysis`` /
``analysis_ranks`` (pure functions) and ``compare``/``compare_view``.
May import: every other room of the engine (it is the top one), never Qt.
"""
from __future__ import annotations

from gradviz.core.record.schema import EXTENSION, SCHEMA_VERSION, RecordError, rank_files, rank_path

__all__ = ["watch", "Watch", "open_run", "open_ranks", "RunReader", "RecordError", "EXTENSION",
           "SCHEMA_VERSION", "rank_files", "rank_path"]


def __getattr__(name: str):
    # lazy: reading a run (CLI, app) must not import the recorder's torch hooks
    import importlib

    if name in ("watch", "Watch"):
        return getattr(importlib.import_module("gradviz.core.record.recorder"), name)
    if name in ("open_run", "open_ranks", "RunReader"):
        return getattr(importlib.import_module("gradviz.core.record.reader"), name)
    raise AttributeError(f"module 'gradviz.core.record' has no attribute {name!r}")
