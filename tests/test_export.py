"""Engine exports: JSON node-link, GraphML, DOT, atomic writes, errors (no Qt needed)."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess

import networkx as nx
import pytest

from gradviz.core.output.colors import CMAP, NAN_RGB, NO_GRAD_RGB, LogColorScale, auto_range, colors_for
from gradviz.core.output.export import ExportError, atomic_write, dot_source, to_node_link, write_graphml
from gradviz.core.runtime.formatting import json_safe
from gradviz.render.export.formats import export_graph


def small_graph() -> nx.DiGraph:
    g = nx.DiGraph(script="/x/model.py", step=0, loss=2.5, roots=["loss"], modules={"fc": {"type": "Linear"}})
    g.add_node("input:0", kind="input", label="input 0", shape=[4, 3], grad_norm=0.01)
    g.add_node("param:fc.weight", kind="param", param="fc.weight", label="fc.weight", shape=(2, 3),
               grad_norm=0.5, grad_hist={"edges": [0.0, 1.0], "counts": [3]}, reachable=True)
    g.add_node("op:1", kind="op", label="addmm", op="AddmmBackward0", shape=[4, 2], grad_norm=float("nan"),
               saved=[{"name": "mat1", "shape": [4, 3]}], grad_nan=1)
    g.add_node("op:0", kind="op", label="mean", shape=[], grad_norm=float("inf"), grad_nan=0)
    g.add_node("param:unused", kind="param", param="unused", label="unused", shape=[5], grad_norm=None,
               reachable=False)
    g.add_node("loss", kind="loss", label="loss", shape=[], value=2.5)  # no grad_norm key at all
    g.add_edge("input:0", "op:1", shape=[4, 3], output_nr=0, count=1)
    g.add_edge("param:fc.weight", "op:1", shape=(3, 2), output_nr=0, count=1)
    g.add_edge("op:1", "op:0", shape=[4, 2], output_nr=0, count=1)
    g.add_edge("op:0", "loss", shape=[], output_nr=0, count=1)
    return g


def test_json_safe_values():
    assert json_safe((1, (2, 3))) == [1, [2, 3]]
    assert json_safe([float("nan"), float("inf"), -float("inf"), 1.5]) == ["nan", "inf", "-inf", 1.5]
    assert json_safe({1: None}) == {"1": None}


def test_node_link_has_required_keys_and_round_trips(tmp_path):
    g = small_graph()
    data = to_node_link(g)
    text = json.dumps(data, allow_nan=False)  # strict JSON: would raise on NaN
    for node in data["nodes"]:
        for key in ("kind", "shape", "grad_norm"):
            assert key in node
        if node["kind"] == "param":
            assert node["param"]
    by_id = {n["id"]: n for n in data["nodes"]}
    assert by_id["op:1"]["grad_norm"] == "nan" and by_id["op:0"]["grad_norm"] == "inf"
    assert by_id["param:fc.weight"]["shape"] == [2, 3]
    assert by_id["loss"]["grad_norm"] is None

    out = tmp_path / "g.json"
    export_graph(g, out)
    back = nx.node_link_graph(json.loads(out.read_text()), edges="edges")
    assert isinstance(back, nx.DiGraph)
    assert set(back.nodes) == set(g.nodes) and set(back.edges) == set(g.edges)
    assert back.graph["modules"]["fc"]["type"] == "Linear"
    assert json.loads(text)["edges"][1]["shape"] == [3, 2]


def test_graphml_parses_with_networkx(tmp_path):
    out = tmp_path / "g.graphml"
    export_graph(small_graph(), out)
    back = nx.read_graphml(out)
    assert set(back.nodes) == set(small_graph().nodes)
    assert json.loads(back.nodes["param:fc.weight"]["shape"]) == [2, 3]
    assert math.isnan(back.nodes["op:1"]["grad_norm"])
    assert back.nodes["op:0"]["grad_norm"] == math.inf
    assert "grad_norm" not in back.nodes["param:unused"]  # None: left out (GraphML has no null)
    assert json.loads(back.graph["modules"])["fc"]["type"] == "Linear"


def test_dot_source_is_accepted_by_graphviz(tmp_path):
    out = tmp_path / "g.dot"
    export_graph(small_graph(), out)
    text = out.read_text()
    assert text.startswith("digraph") and "4×2" in text and "doubleoctagon" in text and "dashed" in text
    assert '"fc.weight\\n2×3"' in text
    try:
        import pydot  # optional
    except ImportError:
        pydot = None
    if pydot is not None:
        assert pydot.graph_from_dot_data(text)
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg", str(out)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "<svg" in done.stdout


def test_dot_quotes_odd_ids():
    g = nx.DiGraph()
    g.add_node('op:"a\\b"', kind="op", label='say "hi"', shape=[1])
    src = dot_source(g)
    assert '"op:\\"a\\\\b\\""' in src


def test_atomic_write_leaves_no_temp_files_and_keeps_old_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")

    def failing(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(target, failing)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.json"]

    atomic_write(target, lambda tmp: open(tmp, "w").write("new"))
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["out.json"]


def test_unknown_extension_and_unwritable_folder(tmp_path, monkeypatch):
    with pytest.raises(ExportError, match="unknown extension"):
        export_graph(small_graph(), tmp_path / "g.bmp")
    with pytest.raises(ExportError, match="does not exist"):
        export_graph(small_graph(), tmp_path / "missing" / "g.json")
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # permission bits do not stop root, so ask "is it writable?" the way the code does
    monkeypatch.setattr(os, "access", lambda p, mode: False if os.fspath(p) == os.fspath(locked) else real_access(p, mode))
    with pytest.raises(ExportError, match="not writable"):
        export_graph(small_graph(), locked / "g.json")


def test_graphml_write_failure_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise ValueError("nope")
    monkeypatch.setattr(nx, "write_graphml", boom)
    with pytest.raises(ValueError):
        write_graphml(small_graph(), tmp_path / "g.graphml")
    assert os.listdir(tmp_path) == []


def test_log_color_scale_is_monotonic_and_marks_special_values():
    scale = LogColorScale(1e-4, 1.0)
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in scale.colors_for([1e-4, 1e-3, 1e-2, 1e-1, 1.0])]
    assert lum == sorted(lum) and lum[0] < lum[-1]
    assert tuple(scale.color(1e-9)) == tuple(CMAP[0]) and tuple(scale.color(1e9)) == tuple(CMAP[-1])  # clamped
    assert scale.color(float("nan")) == NAN_RGB
    assert scale.color(None) == NO_GRAD_RGB
    assert scale.color(float("inf")) != scale.color(float("nan"))
    assert tuple(scale.color(0.0)) == tuple(CMAP[0])  # zero gradient: the bottom of the map
    ticks = [v for v, _ in scale.ticks()]
    assert ticks[0] == pytest.approx(1e-4) and ticks[-1] == pytest.approx(1.0)


def test_auto_range_is_robust():
    norms = [10.0 ** (-3 + k / 50) for k in range(100)] + [1e6, None, float("nan"), 0.0]
    lo, hi = auto_range(norms)
    assert 1e-3 <= lo < 1e-2 and hi < 1e3  # the 1e6 outlier does not stretch the range
    assert auto_range([]) == (1e-6, 1.0)
    lo, hi = auto_range([0.5])
    assert lo < 0.5 < hi
    out = colors_for([1e-3, 1e-1, None])
    assert out.shape == (3, 3) and tuple(out[2]) == NO_GRAD_RGB


def test_auto_range_leaves_a_cluster_of_structural_zeros_at_the_dark_end():
    bulk = [10.0 ** (-4 + k / 25) for k in range(100)]            # 1e-4 .. 1: the healthy graph
    tiny = [3e-10 * (1 + k / 10) for k in range(12)]              # key biases: zero up to rounding
    lo, hi = auto_range(bulk + tiny)
    assert 1e-4 <= lo < 2e-4 and 0.8 < hi <= 1.0
    scale = LogColorScale(lo, hi)
    assert tuple(scale.color(tiny[0])) == tuple(CMAP[0])           # clamped: the darkest colour
    # a spread without a gap keeps its low end, and a gap above the median is not a cluster
    assert auto_range(bulk + [1e-5, 3e-6, 1e-6])[0] < 1e-4
    lo2, _ = auto_range([1e-3] * 30 + [1.0] * 10)
    assert lo2 <= 1e-3
