"""The real-model corpus (#13): architectures nobody here wrote, each must check clean.

``tests/corpus/corpus_models.py`` builds them (transformers' GPT-2, BERT, T5, Llama, Whisper,
ResNet, ConvNeXt, ViT, MobileNetV2; torch.nn's LSTM, GRU, MultiheadAttention,
TransformerEncoder; reentrant checkpointing, spectral/weight norm and orthogonal
parametrizations, tied and sparse embeddings, bf16 autocast, torch.compile) from small
configs with random weights. "Clean" means no ``error`` and no ``warning``; the false alarms
gradviz used to raise on them are asserted away one by one below. Set
``GRADVIZ_CORPUS_TABLE=path`` to write the table of (model, nodes, result, seconds).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS))
from corpus_models import MODELS, REGRESSION  # noqa: E402

from gradviz.core.diagnosis import check_report  # noqa: E402

ZOO = CORPUS / "zoo.py"
_TABLE: list[dict] = []


@pytest.fixture(scope="module")
def reports():
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            os.environ["GRADVIZ_CORPUS"] = name
            try:
                start = time.perf_counter()
                cache[name] = check_report(ZOO)
                _TABLE.append({"model": name, "library": MODELS[name].library, "nodes": cache[name].nodes,
                               "result": _result(cache[name]), "seconds": round(time.perf_counter() - start, 2)})
            finally:
                os.environ.pop("GRADVIZ_CORPUS", None)
        return cache[name]

    yield get
    table = os.environ.get("GRADVIZ_CORPUS_TABLE")
    if table:
        Path(table).write_text(json.dumps(_TABLE, indent=1))


def _result(report) -> str:
    counts = {s: sum(1 for f in report.findings if f.severity == s) for s in ("error", "warning", "info")}
    infos = ", ".join(sorted({f.code for f in report.findings if f.severity == "info"}))
    return "clean" + (f" (info: {infos})" if infos else "") if not counts["error"] + counts["warning"] else \
        f"{counts['error']} error(s), {counts['warning']} warning(s)"


@pytest.mark.parametrize("name", list(MODELS))
def test_real_model_checks_clean(name, reports):
    report = reports(name)
    loud = [(f.code, f.message[:200]) for f in report.findings if f.severity in ("error", "warning")]
    assert loud == [], f"{name}: {loud}"
    assert report.complete and report.nodes >= 5


def test_corpus_is_large_enough():
    libraries = {e.library for e in MODELS.values()}
    assert len(MODELS) >= 15 and "transformers" in libraries and len(libraries) >= 4
    assert set(REGRESSION) <= set(MODELS)


# -- the false alarms of #13, one by one ---------------------------------------------

@pytest.mark.parametrize("name", ["gpt2-checkpointing", "checkpoint-reentrant"])
def test_reentrant_checkpointing_is_reachable(name, reports):
    """The forward runs under no_grad; backward re-runs it with grad: every parameter is reached."""
    report = reports(name)
    assert not any(f.code == "unreachable" for f in report.findings)
    assert report.gradcheck is not None and report.gradcheck["params"]     # and checked numerically


def test_recomputed_parameters_name_the_checkpoint_node():
    from gradviz.core.diagnosis.probe import run_probe
    from gradviz.core.script.load import load_script
    os.environ["GRADVIZ_CORPUS"] = "checkpoint-reentrant"
    try:
        probe = run_probe(load_script(ZOO))
    finally:
        os.environ.pop("GRADVIZ_CORPUS", None)
    assert set(probe.recomputed) == {f"blocks.{i}.0.{w}" for i in range(3) for w in ("weight", "bias")}
    node_names = {nid: fn.name() for fn, nid in probe.node_ids.items()}
    assert {node_names[n] for n in probe.recomputed.values()} == {"CheckpointFunctionBackward"}


def test_t5_upcast_is_not_a_mismatch(reports):
    report = reports("t5")
    assert report.gradcheck["lowest_dtype"] == "float32"          # T5's layer norm, inside the float64 copy
    assert not any(f.code == "gradcheck-mismatch" for f in report.findings)


def test_stateful_modules_are_frozen_during_gradcheck(reports):
    report = reports("spectral-weight-orthogonal")
    assert report.gradcheck["ok"] and report.gradcheck["functions_on_path"] == []
    assert report.gradcheck["lowest_dtype"] == "float64"


@pytest.mark.parametrize("name, exact", [("vit-zero-head", True), ("convnext", False)])
def test_zero_initialised_weight_is_info_not_vanishing(name, exact, reports):
    report = reports(name)
    zero = [f for f in report.findings if f.code == "zero-init"]
    assert len(zero) == 1 and zero[0].severity == "info" and zero[0].data["exact_zero"] is exact
    assert not any(f.code == "vanishing" for f in report.findings)


def test_zero_head_is_judged_after_the_updates():
    os.environ["GRADVIZ_CORPUS"] = "vit-zero-head"
    try:
        report = check_report(ZOO, steps=2, gradcheck=False)
    finally:
        os.environ.pop("GRADVIZ_CORPUS", None)
    zero = next(f for f in report.findings if f.code == "zero-init")
    assert zero.data["resolved_after_steps"] == 2 and "resolved" in zero.message
    assert not any(f.severity in ("error", "warning") for f in report.findings)


def test_batchnorm_curvature_is_not_a_mismatch():
    """MobileNetV2's stem (std-0.02 convs into training-mode BatchNorm, then dense ReLU6 kinks) is 2-3%
    off at eps=1e-6 though autograd is right: the check differences such elements again at smaller
    steps instead of failing them (or skipping them as kinks). Sampled elements of one weight, no
    time budget: the same elements on every machine."""
    from gradviz.core.diagnosis.gradcheck import gradcheck_script
    from gradviz.core.script.load import load_script
    os.environ["GRADVIZ_CORPUS"] = "mobilenet-v2"
    try:
        report = gradcheck_script(load_script(ZOO), params=["mobilenet_v2.conv_stem.reduce_1x1.convolution.weight"],
                                  samples=4)
    finally:
        os.environ.pop("GRADVIZ_CORPUS", None)
    (weight,) = report.params
    assert report.ok and weight.checked == 4 and weight.skipped == 0 and weight.refined >= 1
    assert weight.max_rel < report.rtol


def test_compiled_model_keeps_its_one_compiled_node():
    """gradviz's capture adds no graph break: the traced graph has the compiled region as one node.

    The user's own program is the baseline: with PySide6 loaded (pytest-qt loads it, the app does),
    torch 2.6 counts two breaks in every compiled call without gradviz: its eval_frame runs an
    ``import`` with the frame callback set, and shiboken's ``__import__`` hook (a Python function
    calling sys._getframe) is compiled as a frame of its own; the model's graph stays one graph."""
    from gradviz import trace
    from gradviz.core.trace.walk import walk

    torch._dynamo.reset()
    os.environ["GRADVIZ_CORPUS"] = "torch-compile"
    try:
        sys.modules.pop("corpus_models", None)
        from corpus_models import MODELS as fresh
        entry = fresh["torch-compile"]
        torch.manual_seed(0)
        model = entry.model()
        x, y = entry.batch(0)
        torch._dynamo.utils.counters.clear()
        plain = entry.loss_fn(model(x), y)       # the user's own program
        own, _ = walk([plain.grad_fn])
        own_breaks = dict(torch._dynamo.utils.counters["graph_break"])
        torch._dynamo.reset()                    # compile again, this time under gradviz's capture
        torch._dynamo.utils.counters.clear()
        graph = trace(ZOO)
    finally:
        os.environ.pop("GRADVIZ_CORPUS", None)
    compiled = [n for n, a in graph.nodes(data=True) if a.get("op", "").startswith("CompiledFunction")]
    assert len(compiled) == sum(fn.name().startswith("CompiledFunction") for fn in own) == 1
    assert dict(torch._dynamo.utils.counters["graph_break"]) == own_breaks
