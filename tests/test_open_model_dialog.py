"""File ▸ Open model… in the window (pytest-qt): a callable and input shapes, a .pt2, a weights file."""
from __future__ import annotations

import pytest
import torch
from PySide6.QtWidgets import QDialogButtonBox
from torch import nn

import gradviz.app  # noqa: F401  (PySide6 workaround first)
from gradviz.app.open_model import OpenModelDialog, install, open_model
from test_app_support import WAIT_MS
from test_cli_models import export_program, project  # noqa: F401 - project: the fixture (a user's package)

def test_the_dialog_says_what_it_will_invent_and_opens_only_what_can_work(qtbot):
    dialog = OpenModelDialog()
    qtbot.addWidget(dialog)
    open_button = dialog.buttons.button(QDialogButtonBox.Open)
    assert not open_button.isEnabled() and "a callable" in dialog.preview.text()
    qtbot.keyClicks(dialog.target, "userpkg.models:mlp")
    assert not open_button.isEnabled() and "give the shape of each positional input" in dialog.preview.text()
    qtbot.keyClicks(dialog.inputs, "4,6")
    dialog.loss.setCurrentText("ce")
    dialog.classes.setValue(3)
    assert open_button.isEnabled()
    assert dialog.preview.text() == ("gradviz will open userpkg.models:mlp: invented input 0 float32 4×6 ~N(0,1) "
                                     "(seeded by the step); loss cross-entropy vs random classes in [0, 3)")
    assert dialog.values() == ("userpkg.models:mlp", ["4,6"], "ce:3", None, None)
    dialog.inputs.setText("4,six")
    assert not open_button.isEnabled() and "SHAPE is comma-separated sizes" in dialog.preview.text()


def test_open_model_traces_the_callable_and_says_what_was_invented(qtbot, window, project):
    install(window)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        assert open_model(window, "userpkg.models:mlp", ["4,6"], "ce:3")
    graph = window.document.graph
    assert window.statusBar().currentMessage().startswith("userpkg.models:mlp: invented input 0 float32 4×6")
    # and it stays said: the Inspector's overview (nothing selected) lists what was invented
    assert window.inspector.identity.values["model"] == "userpkg.models:mlp"
    assert window.inspector.identity.values["invented"] == (
        "invented input 0 float32 4×6 ~N(0,1) (seeded by the step); loss cross-entropy vs "
        "random classes in [0, 3)")
    # torch is the oracle
    from userpkg.models import mlp
    model = mlp()
    x = torch.randn((4, 6), generator=torch.Generator().manual_seed(0))
    target = torch.randint(0, 3, (4,), generator=torch.Generator().manual_seed(0))
    nn.functional.cross_entropy(model(x), target).backward()
    assert graph.nodes["param:0.weight"]["grad_norm"] == pytest.approx(model[0].weight.grad.norm().item(), rel=1e-5)
    assert "Open model…" in [a.text() for a in window.menus.menu("File").actions()]


def test_a_pt2_opens_and_a_weights_file_is_explained(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADVIZ_CACHE", str(tmp_path / "cache"))
    install(window)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    torch.export.save(export_program(model, (torch.randn(3, 4),)), tmp_path / "prog.pt2")
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        window.open_script(tmp_path / "prog.pt2")         # what File ▸ Open and drag-and-drop call
    assert "param:2.weight" in window.document.graph
    assert "the program's stored example inputs" in window.statusBar().currentMessage()
    torch.save(model.state_dict(), tmp_path / "weights.pth")
    window.open_script(tmp_path / "weights.pth")
    assert window.errors.title.text() == "Weights, not a model"
    assert "weights.pth holds weights, not a model" in window.errors.message.text()
    assert "--weights weights.pth" in window.errors.message.text()


def test_token_ids_get_their_range_in_the_window(qtbot, window, project):
    """Integer inputs: the range found in the built model (nn.Embedding(37, 8)) is stated in the window."""
    install(window)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        assert open_model(window, "userpkg.models:tagger", ["3,11:long"], "mean")
    assert "ids in [0, the input embedding's" not in window.document.graph.graph["invented"]
    assert window.statusBar().currentMessage() == window.document.graph.graph["invented"]   # said again, complete
    assert window.inspector.identity.values["invented"] == (
        "invented input 0 int64 3×11 ids in [0, 37) (the input embedding emb) (seeded by "
        "the step); loss mean(output)")


def test_a_transformers_class_opens_by_name_and_the_inspector_shows_the_tie(qtbot, window, tmp_path, monkeypatch):
    """Open model… with a class name and a config (issue #28): GPT-2's lm_head is its embedding, one
    parameter whose Inspector row names the twin."""
    import transformers  # noqa: F401  (a test dependency: never skipped)
    monkeypatch.chdir(tmp_path)
    dialog = OpenModelDialog()
    qtbot.addWidget(dialog)
    dialog.target.setText("transformers:GPT2LMHeadModel")
    dialog.inputs.setText("2,8:long")
    dialog.config.setText("n_layer=1,n_embd=16,n_head=2,vocab_size=50")
    assert dialog.buttons.button(QDialogButtonBox.Open).isEnabled()
    assert "config n_layer=1, n_embd=16, n_head=2, vocab_size=50" in dialog.preview.text()
    dialog.config.setText("n_layer")
    assert "KEY=VALUE" in dialog.preview.text() and not dialog.buttons.button(QDialogButtonBox.Open).isEnabled()
    install(window)
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        assert open_model(window, "transformers:GPT2LMHeadModel", ["2,8:long"], "sum", None,
                          "n_layer=1,n_embd=16,n_head=2,vocab_size=50")
    graph = window.document.graph
    assert "ids in [0, 50) (the input embedding transformer.wte)" in graph.graph["invented"]
    nid = "param:transformer.wte.weight"
    window.inspector.show_node(nid, graph.nodes[nid], graph)
    assert window.inspector.identity.values["tied"].startswith("one tensor with lm_head.weight")
