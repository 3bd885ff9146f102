"""The header of an exported picture states exactly what it shows: which step's values
(and the loss's step when it differs), how many boxes, what is collapsed or folded, the
marks, and whether it is a part of the graph."""
from __future__ import annotations

from gradviz.core.layout.grouping import collapse
from gradviz.core.trace.tracer import trace
from gradviz.render.scene.header import ShownState, ShownValues, header_text
from test_app_support import TRANSFORMER


def state(**kw) -> ShownState:
    base = dict(script="/x/mlp.py", values=ShownValues("traced", 0, 2.357, 0), nodes=18)
    base.update(kw)
    return ShownState(**base)


def test_traced_graph_says_its_step_loss_and_size_and_nothing_else():
    assert header_text(state()) == ("mlp.py", "traced step 0 · loss 2.357 · 18 nodes")
    assert header_text(state(script=None))[0] == "autograd graph"


def test_live_values_say_their_steps():
    sub = header_text(state(values=ShownValues("training", 1200, 0.0312, 1200)))[1]
    assert sub.startswith("training step 1,200 · loss 0.0312 · ")
    sub = header_text(state(values=ShownValues("training", 1200, 0.0312, 1234)))[1]
    assert sub.startswith("training step 1,200 · loss 0.0312 at step 1,234 · ")
    sub = header_text(state(values=ShownValues("recorded", 40, None, None)))[1]
    assert sub.startswith("recorded step 40 · 18 nodes")
    sub = header_text(state(values=ShownValues("live", None, 1.5, None)))[1]
    assert sub.startswith("live values · loss 1.5 · ")          # no step given: none claimed


def test_collapsed_folded_marked_and_cropped():
    sub = header_text(state(collapsed=["fc1"], folds=["Block × 200"], marks={"broken": 2, "nan-origin": 1},
                            region="current view"))[1]
    assert sub == ("traced step 0 · loss 2.357 · 18 nodes · 1 module collapsed into boxes · "
                   "Block × 200 folded into one box · 2 cut edges · 1 NaN origin · current view")
    assert "collapsed" not in header_text(state(collapsed=[]))[1]


def test_a_folded_transformer_scene_states_its_fold(qapp):
    from gradviz.render.export.image_export import scene_for

    view = collapse(trace(TRANSFORMER), depth=2, fold=True)
    folds = [a["label"] for _, a in view.nodes(data=True) if a.get("fold")]
    assert folds, "the transformer's blocks should fold"
    scene = scene_for(view)
    shown = scene.shown_state()
    assert shown.folds == folds
    groups = [a for _, a in view.nodes(data=True) if a.get("kind") == "group" and not a.get("fold")]
    sub = header_text(shown)[1]
    assert f"{folds[0]} folded into one box" in sub
    if groups:
        assert f"{len(groups)} module{'s' if len(groups) != 1 else ''} collapsed into boxes" in sub
    else:
        assert "collapsed" not in sub                            # the fold is not counted as a module
