"""What a trace records (``TraceOptions``), and the checks on the options a caller passes.

Below ``tracer`` and ``graph_build``, which both read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradviz.core.stats import tensors as gstats

DETAILS = ("full", "norms")


@dataclass
class TraceOptions:
    """What ``trace`` records. Defaults suit an interactive tool."""

    step: int = 0                 # which batch(step) to trace
    device: str | None = None     # None: leave the model where the script put it
    seed: int | None = 0          # torch.manual_seed before building the model
    histogram_bins: int = gstats.HIST_BINS
    input_grads: bool = True      # make float inputs require grad, so they appear (with dL/dx)
    saved_tensors: bool = True
    capture_forward: bool = True  # module path and source line per node
    details: str = "full"         # "full": every statistic; "norms": exact norms, the rest on demand
    meta: bool = False            # structure only: build and run the model on the meta device
    threads: int | None = None    # torch intra-op threads: None a script's all cores but one (trace_threads.py), 0 as set


def resolve_options(options: TraceOptions | None, overrides: dict[str, Any]) -> TraceOptions:
    options = options or TraceOptions()
    for key, value in overrides.items():
        if not hasattr(options, key):
            raise TypeError(f"trace() got an unexpected option {key!r}")
        setattr(options, key, value)
    if options.details not in DETAILS:
        raise ValueError(f"details must be one of {DETAILS}, not {options.details!r}")
    if options.threads is not None and (type(options.threads) is not int or options.threads < 0):
        raise ValueError(f"threads must be None, 0 or a positive number of threads, not {options.threads!r}")
    return options
