"""gradviz: see and debug backpropagation in PyTorch.

The public API is Qt-free and imported lazily, so ``import gradviz`` is cheap and
works on a headless server:

    graph = gradviz.trace("samples/mlp_digits.py")      # networkx.DiGraph
    findings = gradviz.check("samples/mlp_digits.py")   # the gradient health checklist
    with gradviz.watch(model, "run.gvrun", every=10) as w:
        ...; loss.backward(); w.step(loss)               # record your own training loop
    gradviz.show(loss, model=model, collapse=1)         # in Jupyter: the coloured graph inline
    run = gradviz.open_run("run.gvrun")                 # every recorded step as numpy arrays (.frame(): pandas)
"""
from __future__ import annotations

from gradviz.core.runtime.version import __version__
__all__ = ["trace", "show", "capture", "TraceOptions", "check", "watch", "RecordError", "load_script", "collapse",
           "layout", "ScriptError", "open_run", "__version__"]

# name -> module that defines it; resolved on first attribute access (PEP 562)
_LAZY = {
    "trace": "gradviz.notebook",          # core's trace, returning a graph that draws itself in Jupyter
    "show": "gradviz.notebook",
    "capture": "gradviz.core.trace.tracer",
    "TraceOptions": "gradviz.core.trace.options",
    "load_script": "gradviz.core.script.load",
    "ScriptError": "gradviz.core.script.load",
    "check": "gradviz.notebook",          # core's check, taking what the CLI takes (pkg:callable, .pt2, @sample)
    "watch": "gradviz.core.record",
    "RecordError": "gradviz.core.record",
    "open_run": "gradviz.core.record.run_table",     # a run file as arrays (RunTable)
    "collapse": "gradviz.core.layout.grouping",
    "layout": "gradviz.core.layout.layered",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gradviz' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
