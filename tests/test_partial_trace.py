"""The graph of a failing forward: computed nodes up to the call that raised, that call in red."""
from __future__ import annotations

import textwrap

import networkx as nx
import pytest

from gradviz.core.trace.partial_trace import FAILED, trace_failure
from gradviz.core.trace.tracer import trace
from tests.conftest import ROOT, line_of

VIEWS = ROOT / "tests" / "scripts" / "views"
BAD_FORWARD = ROOT / "tests" / "scripts" / "bad_forward.py"


def _into_failed(g):
    return {u: g.edges[u, FAILED]["shape"] for u in g.predecessors(FAILED)}


def test_matmul_shape_mismatch():
    g = trace_failure(BAD_FORWARD)
    node = g.nodes[FAILED]
    assert node["failed"] and node["op"] == "matmul" and node["label"] == "✗ matmul"
    assert node["location"] == f"{BAD_FORWARD}:10" and "torch.zeros(5, 5)" in node["code"]
    assert "mat1 and mat2 shapes cannot be multiplied (3x3 and 5x5)" in node["error"]
    assert [a["shape"] for a in node["inputs"]] == [[3, 3], [5, 5]]
    assert node["note"] == "3×3 · 5×5"
    feeds = _into_failed(g)
    assert feeds == {"op:0": [3, 3], "failed-arg:1": [5, 5]}
    assert g.nodes["op:0"]["label"] == "addmm" and g.nodes["op:0"]["module"] == "fc"
    assert {"param:fc.weight", "param:fc.bias", "input:0"} <= set(g)
    assert all(a["grad_norm"] is None for a in g.nodes.values())      # nothing ran backward
    assert not any(a["kind"] == "loss" for a in g.nodes.values())
    assert g.graph["partial"] and g.graph["failed"]["error_type"] == "RuntimeError"
    assert g.graph["roots"] == [FAILED]


def test_linear_inside_a_sequential():
    path = VIEWS / "bad_linear.py"
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "linear" and node["module"] == "2" and node["module_type"] == "Linear"
    feeds = _into_failed(g)
    assert feeds["param:2.weight"] == [4, 20] and feeds["param:2.bias"] == [4]
    (act,) = [u for u in feeds if u.startswith("op:")]
    assert g.nodes[act]["label"] == "relu" and feeds[act] == [5, 16]
    assert g.nodes["param:2.weight"]["reachable"] is True
    assert "param:0.weight" in g and "input:0" in g


def test_loss_fn_failure_shows_the_whole_forward_and_the_targets():
    path = VIEWS / "bad_loss_shape.py"
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "mse_loss"
    assert node["location"] == f"{path}:{line_of(path, 'LINE_LOSS')}"
    feeds = _into_failed(g)
    assert sorted(feeds.values()) == [[6, 2], [6, 3]]
    assert g.nodes["failed-arg:1"]["kind"] == "leaf" and g.nodes["failed-arg:1"]["shape"] == [6, 2]
    assert {f"param:{n}" for n in ("0.weight", "0.bias", "2.weight", "2.bias")} <= set(g)


def test_python_raise_is_fed_by_the_last_values():
    path = VIEWS / "bad_raise.py"
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "ValueError" and node["note"] == ""
    assert node["location"] == f"{path}:{line_of(path, 'LINE_RAISE')}"
    assert "expected 4 features, got 3" in node["error"]
    (src,) = g.predecessors(FAILED)
    assert g.nodes[src]["label"] == "relu"


def test_dtype_error_names_both_dtypes():
    path = VIEWS / "bad_dtype.py"
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "mm" and node["location"].endswith(f":{line_of(path, 'LINE_MM')}")
    assert [a["dtype"] for a in node["inputs"]] == ["float32", "float64"]
    assert _into_failed(g)["param:w"] == [4, 2]


def test_a_caught_error_is_not_the_failure():
    path = VIEWS / "caught_then_fails.py"
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "view" and node["location"].endswith(f":{line_of(path, 'LINE_VIEW')}")


def test_the_partial_graph_holds_what_trace_sees_before_the_failing_line(tmp_path):
    # the failing call removed, trace shows the same operations the partial graph shows before it
    good = tmp_path / "good.py"
    good.write_text(BAD_FORWARD.read_text().replace(" @ torch.zeros(5, 5)", ""))
    full = trace(good)
    part = trace_failure(BAD_FORWARD)
    before = sorted(a["label"] for n, a in part.nodes(data=True) if n != FAILED and not n.startswith("failed-"))
    upto = nx.ancestors(full, "op:1") | {"op:1"}             # op:1: the addmm, below the final sum
    assert full.nodes["op:1"]["label"] == "addmm"
    assert before == sorted(full.nodes[n]["label"] for n in upto)


def test_a_forward_that_runs_has_no_failure_graph():
    assert trace_failure(ROOT / "tests" / "scripts" / "tiny_linear.py") is None


def test_library_model_failure_points_at_the_library_line(tmp_path):
    path = tmp_path / "gpt2_too_long.py"
    path.write_text(textwrap.dedent("""
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        def model():
            return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=8,
                                              bos_token_id=0, eos_token_id=0))

        def batch(step):
            ids = torch.randint(0, 50, (2, 12))      # longer than n_positions
            return ids, ids

        def loss_fn(out, y):
            return out.logits.sum()
    """))
    g = trace_failure(path)
    node = g.nodes[FAILED]
    assert node["op"] == "embedding" and node["module"] == "transformer.wpe"
    assert "modeling_gpt2.py" in node["location"] and "wpe" in node["code"]
    assert _into_failed(g)["param:transformer.wpe.weight"] == [8, 16]


def test_a_script_that_exits_is_not_run_again(tmp_path):
    from gradviz.core.trace.partial_trace import failure_graph_for
    from gradviz.core.runtime.errors import ScriptError

    path = tmp_path / "exits.py"
    path.write_text(textwrap.dedent("""
        import sys, torch
        from torch import nn
        model = lambda: nn.Linear(2, 2)
        def batch(step):
            return torch.zeros(1, 2), None
        def loss_fn(out, y):
            sys.exit(3)
    """))
    with pytest.raises(ScriptError) as info:
        trace(path)
    assert info.value.code == "forward-error"
    assert failure_graph_for(info.value, path) is None
