"""In-place writes of cut values: ``buf[:, :8] = h.detach()`` and a memory buffer filled by
``copy_`` under ``torch.no_grad()``; the head reads the buffers, not the encoders' outputs."""
import torch
from torch import nn


class Buffers(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.summary = nn.Linear(8, 16)
        self.register_buffer("memory", torch.zeros(4, 16))
        self.head = nn.Linear(32, 2)

    def forward(self, x):
        h = self.encoder(x)
        buf = torch.zeros(4, 16)
        buf[:, :8] = h[:, :8].detach()  # LINE_SETITEM
        with torch.no_grad():  # LINE_NO_GRAD
            self.memory.copy_(self.summary(x))
        return self.head(torch.cat([buf, self.memory], dim=1))


model = Buffers


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 8, generator=g), torch.randint(2, (4,), generator=g)


def loss_fn(out, y):
    return torch.nn.functional.cross_entropy(out, y)
