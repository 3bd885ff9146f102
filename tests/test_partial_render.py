"""The failing forward and the cut branches as drawn: red failing call with its error, dashed branches."""
from __future__ import annotations

import json

import pytest

import gradviz.render  # noqa: F401
from gradviz.cli.main import main
from gradviz.core.trace.partial_trace import FAILED, trace_failure
from gradviz.core.trace.tracer import trace
from tests.conftest import ROOT, SAMPLES

from PySide6.QtGui import QColor, QImage

from gradviz.render.scene.graph_marks import FailureNote
from gradviz.render.scene.header import header_text
from gradviz.render.export.image_export import scene_for

VIEWS = ROOT / "tests" / "scripts" / "views"


def test_failing_call_is_red_with_its_error_under_it():
    graph = trace_failure(VIEWS / "bad_loss_shape.py")
    scene = scene_for(graph)
    i = scene.index[FAILED]
    assert scene.fill_colors[i] == scene.theme.color("broken")
    assert scene.text_lines(i)[1] == "6×3 · 6×2"          # the input shapes, as the second line
    (note,) = [it for it in scene.items() if isinstance(it, FailureNote)]
    assert "must match the" in note.lines[0] and note.lines[-1] == "inputs: 6×3 float32, 6×2 float32"
    assert any("bad_loss_shape.py:16" in line for line in note.lines)
    assert scene.graph_rect().contains(note.sceneBoundingRect())   # exports keep the note
    assert note.sceneBoundingRect().top() > scene.rects[i].bottom()
    assert scene.marks().counts() == {"failed": 1}
    title, subtitle = header_text(scene.shown_state())
    assert title == "bad_loss_shape.py" and "1 failing call" in subtitle
    # a colour range change keeps the red
    scene.set_color_range(1e-3, 1.0)
    assert scene.fill_colors[i] == scene.theme.color("broken")


def test_sequential_failure_names_the_module_not_torch():
    graph = trace_failure(VIEWS / "bad_linear.py")
    node = graph.nodes[FAILED]
    assert node["location"] == "" and node["module"] == "2"
    scene = scene_for(graph)
    (note,) = [it for it in scene.items() if isinstance(it, FailureNote)]
    assert "in module 2 (Linear)" in note.lines


def test_cut_branches_are_dashed_and_counted():
    graph = trace(VIEWS / "cut_two.py")
    scene = scene_for(graph)
    dashed = [b for b in scene.edge_batches if b.dashed]
    solid = [b for b in scene.edge_batches if not b.dashed]
    assert dashed and solid
    n_dashed = sum(1 for *_e, d in graph.edges(data="dashed") if d)
    assert n_dashed >= 8
    assert scene.marks().counts() == {"cut-branch": 2}
    _, subtitle = header_text(scene.shown_state())
    assert "2 cut branches" in subtitle
    cut = next(n for n, a in graph.nodes(data=True) if a.get("label") == ".detach()")
    assert scene.text_lines(scene.index[cut]) == (".detach()", "cut_two.py:14")
    for n, a in graph.nodes(data=True):
        if a.get("cut_branch"):
            i = scene.index[n]
            assert not scene.reachable[i] and scene.fill_colors[i] == QColor(*scene.color_scale().color(None))
    # the health check's marks come and go; the graph's own stay
    scene.mark_edges([("param:head.weight", "op:1")], "broken")
    scene.clear_marks()
    assert scene.marks().counts() == {"cut-branch": 2}


def test_export_of_a_failing_script_writes_the_partial_graph(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["export", str(VIEWS / "bad_dtype.py"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad_dtype.py:14" in err and "the graph up to the failing call (mm" in err
    data = json.loads(out.read_text())
    failed = next(n for n in data["nodes"] if n["id"] == FAILED)
    assert failed["failed"] is True and failed["op"] == "mm"
    assert data["graph"]["failed"]["error_type"] == "RuntimeError"
    png = tmp_path / "g.png"
    assert main(["export", str(VIEWS / "bad_dtype.py"), "-o", str(png)]) == 2
    assert not QImage(str(png)).isNull()


def test_export_of_a_shape_mismatch_writes_the_partial_graph(tmp_path, capsys):
    path = ROOT / "tests" / "scripts" / "bad_forward.py"
    out = tmp_path / "g.json"
    assert main(["export", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad_forward.py:10" in err and "cannot be multiplied" in err
    data = json.loads(out.read_text())
    failed = next(n for n in data["nodes"] if n["id"] == FAILED)
    assert failed["op"] == "matmul" and [a["shape"] for a in failed["inputs"]] == [[3, 3], [5, 5]]
    assert failed["location"].endswith("bad_forward.py:10")
    assert {"op:0", "param:fc.weight", "param:fc.bias", "input:0"} <= {n["id"] for n in data["nodes"]}
    svg = tmp_path / "g.svg"
    assert main(["export", str(path), "-o", str(svg)]) == 2
    text = svg.read_text()
    assert "matmul" in text and "bad_forward.py:10" in text


def test_export_of_a_script_that_cannot_load_writes_nothing(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert main(["export", str(ROOT / "tests" / "scripts" / "bad_syntax.py"), "-o", str(out)]) == 2
    assert not out.exists()
    assert main(["export", str(SAMPLES / "bugs" / "item_loss.py"), "-o", str(out)]) == 2   # not a raise
    assert not out.exists()
