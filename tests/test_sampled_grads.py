"""Sampled analytic gradients: the values torch computes, and bounded memory."""
from __future__ import annotations

import subprocess
import sys

import torch
from torch import nn

from gradviz.core.diagnosis.sampled_grads import sampled_gradients


def test_sampled_values_are_torch_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2), nn.Linear(2, 2))
    unused = nn.Parameter(torch.ones(3))
    x = torch.randn(4, 5)
    params = [*model.parameters(), unused]
    want = torch.autograd.grad(model(x).pow(2).sum(), params[:-1])
    picks = {k: [0, p.numel() - 1, p.numel() // 2] for k, p in enumerate(params)}
    got = sampled_gradients(model(x).pow(2).sum(), params, lambda k, g: picks[k])
    for k, g in enumerate(want):
        flat = g.reshape(-1)
        assert got[k] == {i: float(flat[i]) for i in picks[k]}
    assert got[-1] == {0: 0.0, 2: 0.0, 1: 0.0}                 # no gradient reached it: zeros
    assert all(p.grad is None for p in params)                # nothing left behind


def test_peak_memory_is_the_gradients_in_flight():
    """16 float64 layers of 32 MB: torch.autograd.grad would hold all 512 MB of gradients."""
    code = (
        "import resource, torch\n"
        "from torch import nn\n"
        "from gradviz.core.diagnosis.sampled_grads import sampled_gradients\n"
        "m = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(16)]).double()\n"
        "x = torch.randn(2, 2048, dtype=torch.float64)\n"
        "loss = m(x).sum()\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "sampled_gradients(loss, list(m.parameters()), lambda k, g: [0, 1])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(out) < 200, f"peak grew by {float(out):.0f} MB"
