"""Folded repeats and structure-only graphs in the window, driven as a user would."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import Qt

from test_app_support import ROOT, change_view, open_and_wait

SAMPLES = ROOT / "samples"

GPT = """\
import sys
sys.path.insert(0, {samples!r})
from transformer import make_gpt, batch, loss_fn

def model():
    return make_gpt(40, 16)
"""


@pytest.fixture
def gpt40(tmp_path) -> Path:
    path = tmp_path / "gpt40.py"
    path.write_text(GPT.format(samples=str(SAMPLES)))
    return path


def block_norms():
    sys.path.insert(0, str(SAMPLES))
    import transformer

    torch.manual_seed(0)
    model = transformer.make_gpt(40, 16)
    x, y = transformer.make_batch(0)
    transformer.loss_fn(model(x), y).backward()
    return [math.sqrt(sum(float(p.grad.double().norm()) ** 2 for p in b.parameters())) for b in model.blocks]


def test_a_deep_stack_opens_folded_and_unfolds(qtbot, window, gpt40):
    open_and_wait(qtbot, window, gpt40)
    doc = window.document
    fid = "fold:blocks.0..blocks.39"
    assert fid in doc.view and doc.view.number_of_nodes() <= 20
    fold = doc.node(fid)
    assert fold["label"] == "Block × 40"
    assert fold["repeat_norms"] == pytest.approx(block_norms(), rel=1e-6)
    # a node inside a folded repeat is drawn by the fold
    inner = next(n for n, a in doc.graph.nodes(data=True) if a.get("module") == "blocks.7.attn.q_proj")
    assert doc.visible_id(inner) == fid
    # selecting the fold: the inspector says what it stands for
    window.select_nodes([fid])
    assert window.inspector.field("repeats") == "40 × Block: blocks.0 … blocks.39"
    assert "blocks." in window.inspector.field("norm per repeat")
    # the context menu offers the three ways to open it
    menu = window.selection.context_menu_for(fid)
    texts = [a.text() for a in menu.actions()]
    assert "Unfold all 40 repeats" in texts and "Show repeats…" in texts and "Open a repeat…" in texts
    # revealing a node inside opens just its repeat: the fold splits around it
    change_view(qtbot, window, lambda: window.reveal(inner))
    assert {"fold:blocks.0..blocks.6", "fold:blocks.8..blocks.39"} <= set(doc.view)
    assert doc.visible_id(inner) == inner
    # double-click a fold: every repeat of it becomes a box of its own
    change_view(qtbot, window, lambda: window.selection.double_clicked("fold:blocks.8..blocks.39"))
    assert "group:blocks.8" in doc.view and "group:blocks.39" in doc.view
    assert "fold:blocks.0..blocks.6" in doc.view


def test_structure_only_window_says_there_are_no_values(qtbot, window):
    window.session.meta = True
    open_and_wait(qtbot, window, SAMPLES / "transformer.py")
    doc = window.document
    assert doc.graph.graph["meta"] is True and doc.graph.graph["details"] == "none"
    assert window.scene.structure is not None
    assert window.overlays.legend._scale is window.scene.structure       # the legend explains the colours
    assert window.inspector.field("memory values") == "structure only (meta device): no values"
    assert window.inspector.field("memory activation memory").endswith("iB")
    # boxes of one module type share a colour; no gradient colours
    ln = [i for i, k in enumerate(window.scene.keys) if doc.view.nodes[k].get("module_type") == "LayerNorm"]
    colors = {window.scene.fill_colors[i].name() for i in ln}
    assert len(colors) == 1
    param = next(n for n in doc.view if str(n).startswith("param:"))
    window.select_nodes([param])
    assert window.inspector.field("grad none") == "structure only (meta device): no values"
    assert window.inspector.field("memory").endswith("iB + the same for its gradient")


def test_selected_op_gets_its_details_and_saved_tensor_values(qtbot, window):
    from test_app_support import MLP

    open_and_wait(qtbot, window, MLP)
    doc = window.document
    assert doc.graph.graph["details"] == "norms"
    op = next(n for n, a in doc.view.nodes(data=True) if a.get("op") == "AddmmBackward0")
    window.select_nodes([op])
    assert window.inspector.field("details") == "computing…"
    table = window.inspector.saved
    tensors = [r for r in range(table.rowCount()) if table.item(r, 2).text()]   # rows with a dtype: tensors
    assert tensors and all(table.item(r, 3).text() == "…" for r in tensors)
    qtbot.waitUntil(lambda: doc.graph.nodes[op].get("grad_mean") is not None, timeout=60000)
    qtbot.waitUntil(lambda: window.inspector.field("details") is None, timeout=5000)
    rows = {window.inspector.saved.item(r, 0).text(): window.inspector.saved.item(r, 3).text()
            for r in range(window.inspector.saved.rowCount())}
    assert any(text.startswith("‖·‖ ") for text in rows.values())
    assert window.inspector.field("saved for backward").endswith("B")
