"""Golden node-link JSON of the digits MLP: same script, same ids, same graph.

Regenerate after an intended change with ``GRADVIZ_UPDATE_GOLDEN=1 pytest tests/test_golden.py``
and review the diff.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

import gradviz
from gradviz.core.output.export import to_node_link
from tolerance import approx_of, float32_rel, magnitude_of

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "mlp_digits.json"
EXACT_KEYS = ("kind", "op", "label", "shape", "dtype", "module", "module_type", "location", "code", "param",
              "custom", "reachable", "saved")
NUMBER_KEYS = ("grad_norm", "grad_mean", "grad_min", "grad_max", "grad_zero_frac", "grad_nan", "grad_inf")
# The golden numbers come from one build of torch, the test runs on any: a gradient's elements go through float32
# reductions (matmuls, sums over the batch) of at most the graph's largest dimension in terms, so a statistic is
# known to float32_rel(that many terms) of the gradient's magnitude (tests/tolerance.py); REL covers that bound.
REL = 1e-4


def portable(graph) -> dict:
    """Node-link data without machine-specific parts (absolute paths, timings)."""
    data = to_node_link(graph)
    for node in data["nodes"]:
        if node.get("location"):
            path, _, line = node["location"].rpartition(":")
            node["location"] = f"{Path(path).relative_to(ROOT)}:{line}"
    keep = {"roots", "loss", "format"}
    data["graph"] = {k: v for k, v in data["graph"].items() if k in keep}
    return data


@pytest.fixture(scope="module")
def current() -> dict:
    return portable(gradviz.trace(ROOT / "samples" / "mlp_digits.py"))


def test_golden_mlp_graph(current):
    if os.environ.get("GRADVIZ_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert [n["id"] for n in current["nodes"]] == [n["id"] for n in golden["nodes"]]
    assert [(e["source"], e["target"], e["shape"]) for e in current["edges"]] == \
           [(e["source"], e["target"], e["shape"]) for e in golden["edges"]]
    longest_reduction = max(max(e["shape"] or [1]) for e in current["edges"])
    assert float32_rel(longest_reduction) <= REL, longest_reduction
    for now, then in zip(current["nodes"], golden["nodes"]):
        for key in EXACT_KEYS:
            assert now.get(key) == then.get(key), (now["id"], key)
        for key in NUMBER_KEYS:
            a, b = now.get(key), then.get(key)
            if isinstance(b, float) and math.isfinite(b):
                scale = 1.0 if key == "grad_zero_frac" else magnitude_of(then)
                assert a == approx_of(b, scale, REL), (now["id"], key)
            else:
                assert a == b, (now["id"], key)


def test_golden_has_the_required_keys(current):
    assert {"kind", "shape", "grad_norm"} <= set(current["nodes"][0])
    params = [n for n in current["nodes"] if n["kind"] == "param"]
    assert {p["param"] for p in params} == {f"fc{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")}
    json.dumps(current, allow_nan=False)  # strict JSON
