"""Intra-op threads while a trace runs: all cores but one, as training does (``devices.training_threads``).

A trace's forward and backward are thousands of small ops. With torch's default (every core) and one
core busy -- the window's GUI thread, another process on a shared machine -- the workers of every
parallel region spin waiting for the slowest: measured on this 2-core machine at load 3, ``gradviz
export`` of the 200-block GPT took 13-16 s CPU with 2 threads against 6.1-6.4 s with 1, the trace
alone 12-14 s wall against 2-3 s. So a trace of a model script (gradviz builds the model and runs
its step, as the window and the CLI do) runs with ``training_threads()`` -- the thread count the window's
training and ``gradviz train`` use -- unless told otherwise (``TraceOptions.threads``), and gives the
calling thread its count back afterwards.

The gradients are torch's either way, but a kernel may round its last bit differently with another
thread count (seen on torch 2.6 and 2.15: a LayerNorm weight's gradient). So a trace of the user's own
loss tensor (``trace(loss, model)``, in the user's process, where they may compare with their own
``backward()``) keeps torch's setting unless ``threads`` says otherwise.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from gradviz.core.runtime.devices import training_threads


def threads_for(option: int | None, script: bool = True) -> int | None:
    """The intra-op thread count a trace with ``TraceOptions.threads == option`` runs with, or None to
    leave torch's setting: None means the default policy (a script: ``training_threads()``; a loss
    tensor: leave it), 0 leave it, n > 0 n."""
    if option == 0 or (option is None and not script):
        return None
    return option if option is not None else training_threads()


@contextlib.contextmanager
def trace_threads(option: int | None, script: bool = True) -> Iterator[None]:
    """Inside, torch uses ``threads_for(option, script)`` intra-op threads (by default never more than it
    had: a user's own lower setting stays); after, as before."""
    wanted = threads_for(option, script)
    before = torch.get_num_threads()
    if wanted is not None and option is None:
        wanted = min(wanted, before)
    if wanted is None or wanted == before:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)
