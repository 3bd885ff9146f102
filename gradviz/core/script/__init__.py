"""The user's model, however it arrives: a script, a ``package.module:callable``, a ``.pt2`` program,
a checkpoint; loaded, called and sized.

Owns: ``load`` (``load_script`` -> ``ModelScript``, the script contract and its errors), ``run``
(a step's inputs on the model's device), ``factory`` and ``generated`` (models with no script),
``checkpoints`` (``--weights`` without unpickling), ``program_archive`` (with ``program_json``,
``program_exprs``, ``program_tensors``: ``.pt2`` programs read without running anything in them),
``pickle_scan`` (pickled tensors, scanned before ``weights_only``), ``file_errors``, ``meta`` (structure
on the meta device, size estimates) and ``fit_guard`` (the real build, stopped before it outgrows memory).
May import: ``runtime``. Never a graph, a statistic or a check.
"""
