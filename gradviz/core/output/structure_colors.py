"""Colours of a graph without values (a meta-device trace): by module type, or by kind of op.

A structure-only graph has no gradient norms to colour by. Boxes are coloured by a
category instead: the type of the module that made them (``"module"``: every
``LlamaDecoderLayer`` one colour, every ``Linear`` another), or the kind of operation
(``"op"``: matrix products, normalisation, activations, element-wise arithmetic, shape
changes, reductions...). Categories get colours from a fixed qualitative palette in
order of how many boxes they hold, so the commonest categories get the clearest hues.
Pure Python: ``render`` paints what this computes.
"""
from __future__ import annotations

import re
from typing import Iterable

import networkx as nx

RGB = tuple[int, int, int]

PALETTE: tuple[RGB, ...] = (
    (141, 183, 226), (247, 182, 120), (143, 205, 140), (237, 148, 147), (190, 167, 220),
    (200, 160, 142), (240, 170, 212), (187, 190, 112), (122, 208, 212), (214, 214, 214),
    (96, 146, 199), (226, 134, 64), (88, 170, 84), (212, 92, 94), (150, 118, 190),
)
OTHER_RGB: RGB = (205, 205, 205)
FIXED = {"input": (255, 255, 255), "loss": (255, 255, 255)}
MODES = ("module", "op")

OP_KINDS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("parameter", r"^$"),
    ("matmul", r"mm|matmul|linear|conv|bmm|addmm|baddbmm|einsum|dot"),
    ("attention", r"attention|softmax"),
    ("normalization", r"norm|rsqrt|var|std"),
    ("activation", r"relu|gelu|silu|sigmoid|tanh|elu|swish|mish|softplus|hardtanh"),
    ("embedding", r"embedding|index|gather|scatter"),
    ("loss", r"loss|log_softmax|cross_entropy"),
    ("reduction", r"sum|mean|max|min|amax|prod|cumsum"),
    ("shape", r"view|reshape|permute|transpose|expand|squeeze|unsqueeze|cat|stack|split|slice|select|t$|"
              r"alias|clone|contiguous|unbind|chunk|narrow|flatten|repeat"),
    ("elementwise", r"add|sub|mul|div|pow|exp|log|sqrt|neg|abs|where|masked|clamp|sin|cos|rsub|fill"),
))


def op_kind(attrs: dict) -> str:
    """The kind of operation a node is (``"other"`` when none fits)."""
    kind = attrs.get("kind", "op")
    if kind in ("param", "leaf"):
        return "parameter"
    if kind in FIXED:
        return kind
    label = str(attrs.get("label") or "").lower()
    for name, pattern in OP_KINDS[1:]:
        if pattern.search(label):
            return name
    return "other"


def category(attrs: dict, mode: str = "module") -> str:
    """A node's category: its module's type (``mode="module"``) or its kind of op (``"op"``);
    inputs and the loss are their own."""
    kind = attrs.get("kind", "op")
    if kind in FIXED:
        return kind
    if mode == "op":
        return attrs.get("module_type") or "group" if kind == "group" else op_kind(attrs)
    return attrs.get("module_type") or "(model)"


class StructureColors:
    """Category -> colour for one graph (a view), and the legend's entries."""

    def __init__(self, graph: nx.DiGraph, mode: str = "module") -> None:
        if mode not in MODES:
            raise ValueError(f"structure colour mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        counts: dict[str, int] = {}
        for _, attrs in graph.nodes(data=True):
            c = category(attrs, mode)
            counts[c] = counts.get(c, 0) + 1
        ranked = sorted((c for c in counts if c not in FIXED), key=lambda c: (-counts[c], c))
        self.counts = counts
        self.colors: dict[str, RGB] = {c: PALETTE[i] for i, c in enumerate(ranked[:len(PALETTE)])}
        self.colors.update(FIXED)
        self.ranked = ranked

    def rgb(self, attrs: dict) -> RGB:
        return self.colors.get(category(attrs, self.mode), OTHER_RGB)

    def rgb_for(self, graph: nx.DiGraph, keys: Iterable) -> list[RGB]:
        return [self.rgb(graph.nodes[k]) for k in keys]

    def entries(self) -> list[tuple[RGB, str]]:
        """(colour, category) for the legend, commonest first; categories past the palette
        share ``OTHER_RGB``."""
        out = [(self.colors[c], c) for c in self.ranked[:len(PALETTE)]]
        if len(self.ranked) > len(PALETTE):
            out.append((OTHER_RGB, f"{len(self.ranked) - len(PALETTE)} other"))
        return out

    @property
    def caption(self) -> str:
        return "structure only · colour = " + ("module type" if self.mode == "module" else "kind of op")


def for_graph(graph: nx.DiGraph | None, mode: str = "module") -> StructureColors | None:
    """Structure colours for a graph traced without values (``graph['meta']``), else None."""
    if graph is None or not graph.graph.get("meta"):
        return None
    return StructureColors(graph, mode)
