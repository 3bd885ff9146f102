"""Graphs in notebooks: a real notebook executed headless (nbclient + ipykernel) shows the coloured SVG."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch import nn

import gradviz
from gradviz.notebook import GraphPicture, TracedGraph

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).parent / "scripts"

CELLS = [
    "import torch\nfrom torch import nn\nimport gradviz\n"
    "torch.manual_seed(0)\n"
    "model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 16), nn.Tanh()),\n"
    "                      nn.Linear(16, 3))\n"
    "loss = nn.functional.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,)))",
    "graph = gradviz.trace(loss, model=model)\ngraph",                         # the graph itself, as a cell's value
    "gradviz.show(loss, model=model, collapse=1)",                           # collapsed to the top modules
    "print(type(graph).__mro__[1].__name__, graph.number_of_nodes())",
]


def svg_of(output: dict) -> str:
    data = output.get("data", {})
    return data.get("image/svg+xml") or data.get("text/html", "")


def test_a_notebook_executed_headless_shows_the_coloured_svg(tmp_path):
    import nbclient       # test extras: nbclient, ipykernel, nbformat
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_before) if p)   # the kernel's gradviz
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = env_before
    whole, collapsed = (svg_of(nb.cells[i].outputs[-1]) for i in (1, 2))
    for svg in (whole, collapsed):
        assert "<svg" in svg and "gradient norm" in svg      # the drawing and its legend
    assert "addmm" in whole and "relu" in whole              # op nodes of the whole graph
    assert len(re.findall(r"#[0-9a-fA-F]{6}", whole)) > 10   # coloured
    assert len(collapsed) < len(whole)                      # depth 1: fewer boxes
    assert nb.cells[3].outputs[0]["text"].startswith("DiGraph ")


def test_trace_returns_a_networkx_graph_that_draws_itself(tmp_path):
    graph = gradviz.trace(SCRIPTS / "tiny_linear.py")
    assert isinstance(graph, TracedGraph) and isinstance(graph, nx.DiGraph)
    assert graph.nodes["param:w"]["grad_norm"] == pytest.approx(12.0)      # torch: dL/dw = 12
    svg = graph._repr_svg_()
    assert svg.startswith("<?xml") and "<svg" in svg and "gradient norm" in svg
    assert not hasattr(graph, "_repr_html_") and not hasattr(GraphPicture, "_repr_html_")   # one picture per output
    picture = gradviz.show(graph, collapse=None)
    assert isinstance(picture, GraphPicture) and picture.save(tmp_path / "g.svg").read_text() == picture.svg


def test_show_a_loss_tensor_and_bad_collapse():
    model = nn.Linear(3, 2)
    loss = model(torch.ones(4, 3)).pow(2).mean()
    picture = gradviz.show(loss, model=model, collapse=0)
    assert "<svg" in picture.svg
    with pytest.raises(ValueError, match="collapse is a module depth"):
        gradviz.show(picture.graph, collapse="deep").svg


def test_import_gradviz_does_not_import_the_notebook_helpers():
    import subprocess

    code = "import sys, gradviz; sys.exit(1 if 'gradviz.notebook' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode == 0
