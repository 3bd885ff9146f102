"""Gradient statistics: torch (in float64) is the oracle, and big tensors use bounded temporaries."""
from __future__ import annotations

import math
import resource
import subprocess
import sys

import numpy as np
import pytest
import torch

from gradviz.core.stats import tensors as gstats
from tolerance import approx_of


def oracle(*tensors):
    x = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    finite = x[torch.isfinite(x)]
    return {"norm": float(torch.linalg.vector_norm(x)), "mean": float(finite.mean()), "std": float(finite.std(unbiased=False)),
            "min": float(finite.min()), "max": float(finite.max()), "zero_frac": float((x == 0).double().mean()),
            "nan": int(torch.isnan(x).sum()), "inf": int(torch.isinf(x).sum()), "numel": x.numel()}


def assert_matches(got, want):
    size = max(abs(want["min"]), abs(want["max"])) if want["numel"] > want["nan"] + want["inf"] else 0.0
    for key in ("norm", "mean", "std", "min", "max"):
        assert got[key] == approx_of(want[key], size, 1e-9), key
    assert got["zero_frac"] == pytest.approx(want["zero_frac"], rel=1e-9), "zero_frac"
    for key in ("nan", "inf", "numel"):
        assert got[key] == want[key], key


@pytest.mark.parametrize("chunk", [gstats.CHUNK, 1000, 7])
def test_stats_match_torch_whatever_the_chunk(monkeypatch, chunk):
    monkeypatch.setattr(gstats, "CHUNK", chunk)
    torch.manual_seed(0)
    a = torch.randn(64, 37)
    a[a.abs() < 0.3] = 0
    b = torch.randn(5, 300).t()            # not contiguous: read along its leading dimension
    c = torch.ones(3, 1).expand(3, 500)    # a broadcast gradient (stride 0)
    got = gstats.tensor_stats([a, None, b, c])
    assert_matches(got, oracle(a, b, c))
    assert sum(got["hist"]["counts"]) == a.numel() + b.numel() + c.numel()
    assert float(gstats.norm_tensor([a, b, c])) == pytest.approx(got["norm"], rel=1e-12)


@pytest.mark.parametrize("chunk", [gstats.CHUNK, 11])
def test_nonfinite_elements_counted_and_left_out(monkeypatch, chunk):
    monkeypatch.setattr(gstats, "CHUNK", chunk)
    g = torch.randn(40, 10)
    g[3, 4] = float("nan")
    g[7, 1] = float("inf")
    g[9, 9] = float("-inf")
    got = gstats.tensor_stats([g])
    assert math.isnan(got["norm"])
    assert_matches({**got, "norm": 0.0}, {**oracle(g), "norm": 0.0})
    assert sum(got["hist"]["counts"]) == g.numel() - 3


def test_histogram_is_the_same_in_chunks(monkeypatch):
    g = torch.randn(10_000)
    whole = gstats.tensor_stats([g], bins=16)["hist"]
    monkeypatch.setattr(gstats, "CHUNK", 333)
    assert gstats.tensor_stats([g], bins=16)["hist"] == whole
    lo, hi = float(g.min()), float(g.max())
    want, _ = np.histogram(g.double().numpy(), bins=16, range=(lo, hi))
    assert sum(abs(int(a) - int(b)) for a, b in zip(whole["counts"], want)) <= 2   # bin edges: rounding


def test_low_precision_sparse_and_integer_tensors():
    h = torch.randn(1000).to(torch.bfloat16)
    assert gstats.tensor_stats([h])["norm"] == pytest.approx(float(h.double().norm()), rel=1e-9)
    sp = torch.sparse_coo_tensor(torch.tensor([[0, 0, 5]]), torch.tensor([1.0, 2.0, 4.0]), (8,))
    got = gstats.tensor_stats([sp])
    assert got["norm"] == pytest.approx(5.0) and got["numel"] == 8 and got["zero_frac"] == pytest.approx(6 / 8)
    assert float(gstats.norm_tensor([sp])) == pytest.approx(5.0)
    assert gstats.tensor_stats([torch.arange(4)])["max"] == 3.0
    assert gstats.tensor_stats([None]) is None and gstats.norm_tensor([None]) is None


def test_big_gradient_costs_bounded_temporaries():
    """A 400 MB float32 gradient: its statistics used to take ~3x its size in float64 copies;
    now the peak grows by a few chunks only (measured in a fresh process)."""
    code = (
        "import resource, torch\n"
        "from gradviz.core.stats.tensors import tensor_stats\n"
        "g = torch.randn(100_000_000)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "s = tensor_stats([g])\n"
        "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print((after - before) / 1024, s['numel'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    grown_mb, numel = float(out[0]), int(out[1])
    assert numel == 100_000_000
    assert grown_mb < 200, f"statistics of a 400 MB tensor grew the peak by {grown_mb:.0f} MB"
