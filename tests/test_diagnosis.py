"""The diagnosis checklist: each finding from its bug sample and from general variations,
no false alarms on healthy models, JSON and exit statuses of ``gradviz check``."""
from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from gradviz.core.diagnosis import CODES, Finding, check
from gradviz.core.diagnosis.findings import sort_findings

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_diagnosis_scripts as diag_scripts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
BUGS = SAMPLES / "bugs"

EXPECTED = {
    "detach": "unreachable", "numpy_roundtrip": "unreachable", "no_grad": "unreachable",
    "argmax": "unreachable", "unused_submodule": "unreachable", "item_loss": "loss-not-tensor",
    "vector_loss": "loss-not-scalar", "inplace": "inplace", "softmax_log": "inf", "dead_relu": "dead-relu",
    "sigmoid_init": "saturated-sigmoid", "deep_sigmoid": "vanishing", "exploding": "exploding",
    "bad_backward": "gradcheck-mismatch", "frozen": "frozen", "syntax_error": "script-error",
    "import_error": "script-error", "missing_batch": "script-error",
}


def codes(findings):
    return [f.code for f in findings]


@pytest.fixture(scope="module")
def bug_results():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = check(BUGS / f"{name}.py")
        return cache[name]
    return get


# ---------------------------------------------------------------------------
# the bug samples


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bug_sample_gives_its_finding(name, bug_results):
    found = bug_results(name)
    assert EXPECTED[name] in codes(found), [(f.code, f.message) for f in found]
    for f in found:
        assert f.code in CODES and f.severity in ("error", "warning", "info")
        assert f.message and not f.message.startswith(" ")


@pytest.mark.parametrize("name, prefix", [("detach", "encoder."), ("numpy_roundtrip", "backbone."),
                                          ("no_grad", "embed."), ("argmax", "encoder."),
                                          ("unused_submodule", "norm.")])
def test_unreachable_names_the_cut_off_params_only(name, prefix, bug_results):
    found = [f for f in bug_results(name) if f.code == "unreachable"]
    params = [p for f in found for p in f.params]
    assert params and all(p.startswith(prefix) for p in params)
    assert all(f"param:{p}" in f.nodes for f in found for p in f.params)


def test_detach_names_line_modules_and_broken_edge(bug_results):
    (f,) = [f for f in bug_results("detach") if f.code == "unreachable"]
    assert f.location.endswith("detach.py:21")
    assert ".detach()" in f.message
    assert f.data["from_module"] == "encoder" and f.data["to_module"] == "head"
    assert "`encoder`" in f.message and "`head`" in f.message
    assert len(f.edges) == 1
    u, v = f.edges[0]
    assert u.startswith("param:encoder.") and v.startswith("op:")
    assert f.data["group_edge"] == ["group:encoder", "group:head"]


def test_edges_are_nodes_of_the_traced_graph(bug_results):
    from gradviz.core.trace.tracer import trace
    for name in ("detach", "no_grad", "numpy_roundtrip", "argmax"):
        graph = trace(BUGS / f"{name}.py")
        for f in bug_results(name):
            for u, v in f.edges:
                assert u in graph and v in graph, (name, u, v)
            for n in f.nodes:
                assert n in graph, (name, n)


@pytest.mark.parametrize("name, words", [("numpy_roundtrip", ["numpy"]), ("no_grad", ["no_grad"]),
                                         ("argmax", ["argmax", "not differentiable"]),
                                         ("unused_submodule", ["never called", "LayerNorm"])])
def test_unreachable_says_why(name, words, bug_results):
    (f,) = [f for f in bug_results(name) if f.code == "unreachable"]
    for w in words:
        assert w in f.message
    assert f.location


def test_no_grad_broken_between_embed_and_body(bug_results):
    (f,) = [f for f in bug_results("no_grad") if f.code == "unreachable"]
    assert f.data["from_module"] == "embed" and f.data["to_module"] == "body"
    assert f.location.endswith("no_grad.py:21")


def test_inplace_names_the_call_and_the_saved_tensor(bug_results):
    (f,) = [f for f in bug_results("inplace") if f.code == "inplace"]
    assert f.location.endswith("inplace.py:22")
    assert "mul_" in f.message and "sigmoid" in f.message.lower()
    assert f.data["created_at"].endswith("inplace.py:21")
    assert f.nodes and all(n.startswith("op:") for n in f.nodes)


def test_softmax_log_points_at_the_log(bug_results):
    (f,) = [f for f in bug_results("softmax_log") if f.code == "inf"]
    assert f.location.endswith("softmax_log.py:36")
    assert f.data["op"] == "log" and f.data["nan_origin"] == f.nodes
    assert "log_softmax" in f.message or "cross_entropy" in f.message


def test_bad_backward_names_params_and_function(bug_results):
    (f,) = [f for f in bug_results("bad_backward") if f.code == "gradcheck-mismatch"]
    assert {"fc1.weight", "fc1.bias"} <= set(f.params)
    assert not any(p.startswith("fc2") for p in f.params)
    assert "Square" in f.message
    assert any(fn["function"].endswith("Square") for fn in f.data["functions"])
    assert f.location and "bad_backward.py" in f.location


def test_dead_relu_fraction_and_layer(bug_results):
    (f,) = [f for f in bug_results("dead_relu") if f.code == "dead-relu"]
    assert f.modules == ["hidden_act"] and f.data["dead_fraction"] > 0.9
    assert "%" in f.message
    assert "vanishing" not in codes(bug_results("dead_relu"))


def test_sigmoid_init_rate(bug_results):
    (f,) = [f for f in bug_results("sigmoid_init") if f.code == "saturated-sigmoid"]
    assert f.modules == ["act1"] and f.data["effective_rate"] < 0.5


def test_deep_sigmoid_flags_first_layers(bug_results):
    (f,) = [f for f in bug_results("deep_sigmoid") if f.code == "vanishing"]
    assert "layers.0.weight" in f.params and "head.weight" not in f.params
    assert f.data["min_ratio"] < 1e-6


def test_exploding_norm(bug_results):
    (f,) = [f for f in bug_results("exploding") if f.code == "exploding"]
    assert f.data["max_norm"] > 1e4
    assert "clip_grad_norm_" in f.message


def test_frozen_is_info_only(bug_results):
    found = bug_results("frozen")
    assert codes(found) == ["frozen"]
    assert found[0].severity == "info" and all(p.startswith("features.") for p in found[0].params)


def test_loss_findings_have_locations(bug_results):
    (f,) = bug_results("item_loss")
    assert f.code == "loss-not-tensor" and ".item()" in f.message and f.location.endswith("item_loss.py:34")
    (g,) = bug_results("vector_loss")
    assert g.code == "loss-not-scalar" and "(32,)" in g.message


@pytest.mark.parametrize("name, line", [("syntax_error", 18), ("import_error", 10)])
def test_script_error_location(name, line, bug_results):
    (f,) = bug_results(name)
    assert f.code == "script-error" and f.location.endswith(f"{name}.py:{line}")


# ---------------------------------------------------------------------------
# healthy models: no false alarms


@pytest.mark.parametrize("name", ["mlp_digits", "cnn", "transformer"])
def test_healthy_samples_raise_no_alarm(name, monkeypatch):
    if name == "transformer":
        monkeypatch.setenv("GRADVIZ_GPT_BLOCKS", "2")
    found = check(SAMPLES / f"{name}.py")
    assert found == [], [(f.code, f.message) for f in found]


def test_healthy_with_dropout_and_batchnorm(tmp_path):
    found = check(diag_scripts.write(tmp_path, "healthy_dropout_bn"))
    assert found == [], [(f.code, f.message) for f in found]


def test_healthy_sample_trains_without_alarm():
    found = check(SAMPLES / "mlp_digits.py", steps=15)
    assert found == [], [(f.code, f.message) for f in found]


# ---------------------------------------------------------------------------
# general cases, written here


def _one(findings, code):
    got = [f for f in findings if f.code == code]
    assert len(got) == 1, [(f.code, f.message) for f in findings]
    return got[0]


def test_detach_inside_a_submodule(tmp_path):
    p = diag_scripts.write(tmp_path, "inner_detach")
    f = _one(check(p), "unreachable")
    assert set(f.params) == {"block.a.weight", "block.a.bias"}
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'CUT')}")
    assert f.data["from_module"] == "block.a" and f.data["to_module"] == "block.b"
    assert f.edges


def test_parameter_never_used(tmp_path):
    p = diag_scripts.write(tmp_path, "unused_param")
    f = _one(check(p), "unreachable")
    assert f.params == ["temperature"] and f.data["cause"] == "never-used"
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'UNUSED')}")


def test_tensor_from_tolist(tmp_path):
    p = diag_scripts.write(tmp_path, "tolist")
    f = _one(check(p), "unreachable")
    assert set(f.params) == {"enc.weight", "enc.bias"} and ".tolist()" in f.message
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'CUT')}")


def test_data_attribute_cut(tmp_path):
    p = diag_scripts.write(tmp_path, "data_cut")
    f = _one(check(p), "unreachable")
    assert f.params == ["fc1.weight"] and ".data" in f.message


def test_output_never_reaches_loss(tmp_path):
    f = _one(check(diag_scripts.write(tmp_path, "aux_unused")), "unreachable")
    assert set(f.params) == {"aux.weight", "aux.bias"} and f.data["cause"] == "output-unused"


def test_whole_forward_under_no_grad(tmp_path):
    p = diag_scripts.write(tmp_path, "all_no_grad")
    found = check(p)
    assert "loss-not-tensor" in codes(found)
    f = _one(found, "unreachable")
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'NOGRAD')}") and "no_grad" in f.message
    assert len(f.params) == 4


def test_inplace_iadd_on_relu_output_saved_later(tmp_path):
    p = diag_scripts.write(tmp_path, "relu_iadd")
    f = _one(check(p), "inplace")
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'INPLACE')}")
    assert f.data["saved_by"] == "MulBackward0"
    assert f.data["saved_by_location"].endswith(f":{diag_scripts.line_of(p, 'SAVES')}")
    assert "relu" in f.message


def test_nan_from_sqrt_zero_in_backward(tmp_path):
    p = diag_scripts.write(tmp_path, "sqrt_zero")
    found = check(p)
    f = [f for f in found if f.code in ("nan", "inf")][0]
    assert f.data["stage"] == "backward" and f.data["node"] == "SqrtBackward0"
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'SQRT')}")
    assert f.nodes == f.data["nan_origin"] and f.nodes[0].startswith("op:")


def test_nan_in_the_data(tmp_path):
    f = _one(check(diag_scripts.write(tmp_path, "nan_data")), "nan")
    assert f.data["inputs_finite"] is False and "input 0" in f.message


def test_custom_function_wrong_backward_shape(tmp_path):
    p = diag_scripts.write(tmp_path, "bad_shape")
    f = _one(check(p), "gradcheck-mismatch")
    assert "Double" in f.message and "shape" in f.message
    line = int(f.location.rpartition(":")[2])
    assert f.nodes and "bad_shape.py" in f.location
    assert diag_scripts.line_of(p, "WRONG SHAPE") - 3 <= line < diag_scripts.line_of(p, "WRONG SHAPE")


def test_custom_function_with_extra_argument(tmp_path):
    f = _one(check(diag_scripts.write(tmp_path, "bad_scale")), "gradcheck-mismatch")
    assert "Scale" in f.message and "fc1.weight" in f.params


def test_dead_units_through_clamp(tmp_path):
    p = diag_scripts.write(tmp_path, "dead_clamp")
    f = _one(check(p), "dead-relu")
    assert f.location.endswith(f":{diag_scripts.line_of(p, 'CLAMP')}") and f.data["dead_fraction"] == 1.0


def test_saturated_tanh(tmp_path):
    p = diag_scripts.write(tmp_path, "tanh_sat")
    f = _one(check(p), "saturated-sigmoid")
    assert f.data["kind"] == "tanh" and f.data["effective_rate"] < 0.5


def test_forward_error_is_a_script_error(tmp_path):
    p = diag_scripts.write(tmp_path, "shape_error")
    f = _one(check(p), "script-error")
    assert f.data["stage"] == "forward" and f.location.endswith(f":{diag_scripts.line_of(p, 'SHAPE')}")


def test_training_run_finds_divergence(tmp_path):
    p = diag_scripts.write(tmp_path, "high_lr")
    assert not [f for f in check(p) if f.severity == "error"]
    found = check(p, steps=20)
    f = [f for f in found if f.code in ("nan", "inf", "exploding")][0]
    assert "step" in f.message and f.data.get("step") is not None


# ---------------------------------------------------------------------------
# node ids, ordering, JSON and the CLI


def test_probe_ids_match_trace_ids():
    from gradviz.core.diagnosis.probe import run_probe
    from gradviz.core.script.load import load_script
    from gradviz.core.trace.tracer import trace
    script = load_script(SAMPLES / "cnn.py")
    graph = trace(script)
    probe = run_probe(script)
    for fn, nid in probe.node_ids.items():
        assert nid in graph
        if nid.startswith("op:"):
            assert graph.nodes[nid]["op"] == fn.name()


def test_findings_sorted_and_serialisable():
    fs = [Finding("frozen", "info", "i"), Finding("dead-relu", "warning", "w"),
          Finding("unreachable", "error", "e", data={"x": float("nan")})]
    out = sort_findings(fs)
    assert [f.severity for f in out] == ["error", "warning", "info"]
    d = out[0].to_dict()
    assert json.loads(json.dumps(d))["data"]["x"] == "nan"
    assert Finding.from_dict(d).code == "unreachable"
    with pytest.raises(ValueError):
        Finding("x", "fatal", "m")


def _cli(argv):
    from gradviz.cli.main import main
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(argv)
    return rc, buf.getvalue()


def test_cli_json_schema_and_exit_status():
    rc, out = _cli(["check", str(BUGS / "detach.py"), "--json"])
    assert rc == 1
    doc = json.loads(out)
    assert set(doc) >= {"script", "ok", "findings"} and doc["ok"] is False
    f = doc["findings"][0]
    assert set(f) == {"code", "severity", "message", "params", "modules", "nodes", "location", "edges", "data"}
    assert f["code"] == "unreachable" and isinstance(f["edges"], list)


def test_cli_exit_statuses(tmp_path):
    assert _cli(["check", str(BUGS / "syntax_error.py")])[0] == 2
    assert _cli(["check", str(BUGS / "missing_batch.py"), "--json"])[0] == 2
    rc, out = _cli(["check", str(BUGS / "frozen.py")])
    assert rc == 0 and "frozen" in out and "INFO" in out
    rc, out = _cli(["check", str(SAMPLES / "mlp_digits.py"), "--json"])
    assert rc == 0 and json.loads(out) == {**json.loads(out), "ok": True, "findings": []}
    rc, out = _cli(["check", str(BUGS / "sigmoid_init.py")])
    assert rc == 0 and "saturated-sigmoid" in out


def test_cli_readable_report():
    rc, out = _cli(["check", str(BUGS / "inplace.py")])
    assert rc == 1
    assert "inplace" in out and "ERROR" in out and "inplace.py:22" in out


def test_public_import_path():
    from gradviz.core.diagnosis import check as c
    assert c is check
