"""Shared bits of the reproduced loops: a tiny deterministic data set (no downloads)."""
import torch


def data(n=64, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = x @ torch.randn(d, 1, generator=g) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y
