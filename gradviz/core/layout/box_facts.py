"""What a closed module box or a fold box says about its inside, in one short line.

A box that hides a module should still answer the first questions about it: how big is it
(its parameter count), how large is its parameters' gradient (the norm of all of them, the
number the box is coloured by when it has parameters) and — on the meta device, where
there are no gradient values — how much memory its ops keep for backward. Parameter-free
modules (an activation, a dropout) say how many graph nodes they hold instead.
"""
from __future__ import annotations

from gradviz.core.runtime.formatting import byte_size, number


def count_text(n: int) -> str:
    """``1234`` -> ``1.2k``, ``12_345_678`` -> ``12.3M``, ``7`` -> ``7``."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            value = f"{n / size:.1f}".rstrip("0").rstrip(".")
            return f"{value}{suffix}"
    return str(int(n))


def box_facts(numel: int | None, param_grad_norm: float | None, saved_bytes: int | None,
              n_nodes: int, meta: bool) -> str:
    """``'1.2M params · grad 0.031'`` (the norm of the parameters' gradients); on meta graphs
    ``'1.2M params · 3.1 MiB saved'``; without parameters ``'12 nodes'`` (and the saved bytes
    on meta graphs)."""
    parts = []
    if numel:
        parts.append(f"{count_text(numel)} params")
        if not meta and param_grad_norm is not None:
            parts.append(f"grad {number(param_grad_norm, compact=True)}")
        elif not meta:
            parts.append("no grad")
    else:
        parts.append(f"{number(n_nodes, grouped=True)} node{'s' if n_nodes != 1 else ''}")
    if meta and saved_bytes:
        parts.append(f"{byte_size(saved_bytes)} saved")
    return " · ".join(parts)
