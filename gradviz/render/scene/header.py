"""The header of an exported image: one title and one line that state exactly what the
picture shows (no Qt; ``GraphScene.shown_state`` fills ``ShownState`` from what is drawn).

    mlp_digits.py
    training step 1,200 · loss 0.0312 · 38 nodes · 2 modules collapsed into boxes · 1 cut edge
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from gradviz.core.runtime.formatting import number
from gradviz.core.output.marks import EDGE_STYLES, NODE_STYLES

__all__ = ["ShownValues", "ShownState", "header_text", "SOURCES"]

SOURCES = {"traced": "traced", "training": "training", "recorded": "recorded", "live": "live",
           "structure": "structure only (meta device): no gradient"}
MARK_NOUNS = {"broken": ("cut edge", "cut edges"), "nan-origin": ("NaN origin", "NaN origins"),
              "error": ("error mark", "error marks"), "warning": ("warning mark", "warning marks"),
              "info": ("note", "notes"), "dead": ("dead unit", "dead units"),
              "cut-branch": ("cut branch", "cut branches"),
              "failed": ("failing call", "failing calls")}


@dataclass
class ShownValues:
    """Which step the drawn values come from. The colours (gradient norms) and the loss
    may come from different steps during training: both steps are kept."""

    source: str = "traced"           # traced | training | recorded | live (step not given)
    norms_step: int | None = None
    loss: float | None = None
    loss_step: int | None = None


@dataclass
class ShownState:
    """Everything the header states about a drawing."""

    script: str | None
    values: ShownValues
    nodes: int                          # boxes drawn
    collapsed: list[str] = field(default_factory=list)   # modules drawn as one box
    framed: int = 0                     # modules drawn open, with a frame
    marks: dict[str, int] = field(default_factory=dict)  # style -> count
    color_range: tuple[float, float] = (1e-6, 1.0)
    fixed_range: bool = False
    region: str = "whole graph"         # or "current view"
    folds: list[str] = field(default_factory=list)       # repeated blocks drawn as one box: "Block × 200"


def _plural(n: int, one: str, many: str) -> str:
    return f"{number(n, grouped=True)} {one if n == 1 else many}"


def values_text(v: ShownValues) -> list[str]:
    """'training step 1,200', 'loss 0.0312' (+ ' at step 1,234' when it is another step)."""
    source = SOURCES.get(v.source, v.source)
    parts = [f"{source} step {number(v.norms_step, grouped=True)}" if v.norms_step is not None
             else f"{source} values"]
    if v.loss is not None:
        other = v.loss_step is not None and v.loss_step != v.norms_step
        parts.append(f"loss {number(v.loss)}" + (f" at step {number(v.loss_step, grouped=True)}" if other else ""))
    return parts


def header_text(state: ShownState) -> tuple[str, str]:
    """(title, subtitle) of the picture: the script's name, then what is shown, exactly."""
    title = os.path.basename(state.script or "") or "autograd graph"
    parts = values_text(state.values)
    parts.append(_plural(state.nodes, "node", "nodes"))
    if state.collapsed:
        parts.append(_plural(len(state.collapsed), "module", "modules") + " collapsed into boxes")
    if state.folds:
        parts.append(", ".join(state.folds) + " folded into one box" + ("" if len(state.folds) == 1 else " each"))
    for style_name, n in state.marks.items():
        if n and (style_name in EDGE_STYLES or style_name in NODE_STYLES):
            one, many = MARK_NOUNS.get(style_name, (style_name, style_name))
            parts.append(_plural(n, one, many))
    if state.region != "whole graph":
        parts.append(state.region)
    return title, " · ".join(parts)
