"""The fast trace (exact norms only) and the details computed on demand: torch is the oracle."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import gradviz
from gradviz.core.trace.details import DetailsError, node_details
from gradviz.core.stats.tensors import STAT_KEYS
from tolerance import approx_of, magnitude_of

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def both():
    path = SAMPLES / "transformer.py"
    return gradviz.trace(path), gradviz.trace(path, details="norms")


def test_norms_mode_keeps_every_exact_norm(both):
    full, fast = both
    assert list(full.nodes) == list(fast.nodes) and list(full.edges) == list(fast.edges)
    assert fast.graph["details"] == "norms" and full.graph["details"] == "full"
    for nid, a in fast.nodes(data=True):
        b = full.nodes[nid]
        if b["grad_norm"] is None:
            assert a["grad_norm"] is None, nid
            continue
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-12), nid
        assert a["grad_numel"] == b["grad_numel"] and a["grad_nan"] == 0 and a["grad_inf"] == 0
        assert a["grad_mean"] is None and a["grad_hist"] is None
        if a["kind"] == "param":
            assert a["value_norm"] == pytest.approx(b["value_norm"], rel=1e-12)
            assert a["value_mean"] is None


def test_details_on_demand_equal_the_full_trace(both):
    full, fast = both
    ops = [n for n, a in fast.nodes(data=True) if a["kind"] == "op"]
    wanted = [ops[0], ops[len(ops) // 2], ops[-1], "param:blocks.0.attn.q_proj.weight", "loss"]
    got = node_details(fast, wanted)
    assert set(got) == set(wanted)
    for nid in wanted:
        for key in STAT_KEYS:
            want = full.nodes[nid][f"grad_{key}"]
            assert got[nid][f"grad_{key}"] == approx_of(want, magnitude_of(full.nodes[nid]), 1e-9), (nid, key)
        assert got[nid]["grad_hist"] == full.nodes[nid]["grad_hist"]
    # what the op saved for backward, with its values (torch as the oracle: the replayed forward)
    head = next(n for n in ops if fast.nodes[n]["op"] == "MmBackward0" and fast.nodes[n]["module"] == "lm_head")
    saved = {s["name"]: s for s in node_details(fast, [head])[head]["saved_stats"]}
    assert saved["mat2"]["norm"] == pytest.approx(fast.nodes["param:lm_head.weight"]["value_norm"], rel=1e-9)
    assert saved["self"]["numel"] == math.prod(fast.nodes[head]["shape"][:1]) * 64
    q = got["param:blocks.0.attn.q_proj.weight"]
    assert q["value_std"] == pytest.approx(full.nodes["param:blocks.0.attn.q_proj.weight"]["value_std"])


def test_input_details_and_torch_as_oracle():
    path = SCRIPTS / "tiny_linear.py"
    fast = gradviz.trace(path, details="norms")
    got = node_details(fast, ["input:0", "param:w"])
    assert got["input:0"]["grad_mean"] == pytest.approx(18.0)
    assert got["param:w"]["grad_mean"] == pytest.approx(12.0)
    assert fast.nodes["param:w"]["grad_norm"] == pytest.approx(12.0)


def test_nonfinite_norms_leave_counts_unknown_until_details(tmp_path):
    script = tmp_path / "nan_grad.py"
    script.write_text(
        "import torch\n"
        "from torch import nn\n"
        "def model():\n    return nn.Linear(3, 1)\n"
        "def batch(step):\n    return torch.tensor([[0.0, 1.0, 2.0]]), None\n"
        "def loss_fn(out, targets):\n    return torch.sqrt(out * 0).sum()\n")   # d sqrt(0) = inf, times 0 = nan
    fast = gradviz.trace(script, details="norms")
    bad = [n for n, a in fast.nodes(data=True) if a["grad_norm"] is not None and not math.isfinite(a["grad_norm"])]
    assert bad
    assert all(fast.nodes[n]["grad_nan"] is None for n in bad)
    got = node_details(fast, bad)
    full = gradviz.trace(script)
    for n in bad:
        assert got[n]["grad_nan"] == full.nodes[n]["grad_nan"] and got[n]["grad_inf"] == full.nodes[n]["grad_inf"]


def test_details_refuse_a_changed_script_and_meta_graphs(tmp_path):
    script = tmp_path / "m.py"
    body = ("import torch\nfrom torch import nn\n"
            "def model():\n    return nn.Sequential({layers})\n"
            "def batch(step):\n    return torch.randn(2, 4), torch.randn(2, 4)\n"
            "def loss_fn(out, y):\n    return ((out - y) ** 2).mean()\n")
    script.write_text(body.format(layers="nn.Linear(4, 4)"))
    fast = gradviz.trace(script, details="norms")
    script.write_text(body.format(layers="nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)"))
    with pytest.raises(DetailsError, match="no longer builds"):
        node_details(fast, ["loss"])
    with pytest.raises(DetailsError, match="meta device"):
        node_details(gradviz.trace(SAMPLES / "mlp_digits.py", meta=True), ["loss"])
    with pytest.raises(DetailsError, match="not traced from a script"):
        model = torch.nn.Linear(2, 1)
        node_details(gradviz.trace(model(torch.ones(1, 2)).sum(), model, details="norms"), ["loss"])


def test_unknown_details_option():
    with pytest.raises(ValueError, match="details"):
        gradviz.trace(SCRIPTS / "tiny_linear.py", details="some")


def test_details_refuse_a_replay_that_is_not_the_traced_step(tmp_path):
    """A script whose randomness its seed does not fix (here: a generator of its own, seeded by the clock)
    replays another step: the replay's norms differ from the traced ones and are refused, never shown."""
    script = tmp_path / "unseeded.py"
    script.write_text("import time, torch\nfrom torch import nn\n"
                      "G = torch.Generator().manual_seed(time.perf_counter_ns())\n"
                      "def model():\n    return nn.Linear(4, 2)\n"
                      "def batch(step):\n    return torch.randn(8, 4, generator=G), torch.randn(8, 2, generator=G)\n"
                      "def loss_fn(out, y):\n    return ((out - y) ** 2).mean()\n")
    fast = gradviz.trace(script, details="norms")
    with pytest.raises(DetailsError, match="did not reproduce the traced step"):
        node_details(fast, ["param:weight"])
