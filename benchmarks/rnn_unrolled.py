"""A three-layer LSTM written out step by step over 2,000 time steps (the cells are called in a loop)."""
import torch
from torch import nn

STEPS, WIDTH = 2000, 16


class Cell(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ih = nn.Linear(d, 4 * d)
        self.hh = nn.Linear(d, 4 * d, bias=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, h, c):
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(self.norm(c))
        return h, c


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell1, self.cell2, self.cell3 = Cell(WIDTH), Cell(WIDTH), Cell(WIDTH)
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, xs):
        b = xs.shape[0]
        h1 = c1 = h2 = c2 = h3 = c3 = xs.new_zeros(b, WIDTH)
        for t in range(xs.shape[1]):
            h1, c1 = self.cell1(xs[:, t], h1, c1)
            h2, c2 = self.cell2(h1, h2, c2)
            h3, c3 = self.cell3(h2, h3, c3)
        return self.head(h3)


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, STEPS, WIDTH, generator=g), torch.randn(4, 1, generator=g)


def loss_fn(out, y):
    return ((out - y) ** 2).mean()
