"""Source: queenie88/A-GCN issue #4 ("Question about gradient flow").

The attention-driven adjacency ``adj = softmax(theta(x) @ phi(x)^T)`` is ``.detach()``-ed before the
graph convolution, so W_theta and W_phi never get a gradient; the maintainers: "the .detech() should
be removed". Its ``gen_adj`` (from ML-GCN's util.py) normalises with ``D = torch.pow(A.sum(1).float(), -0.5)``: a
float32 tensor by name, so on a float64 copy ``torch.matmul(A, D)`` mixes precisions and raises. The
fixed version must pass the numerical check (gradviz then checks in float32 with tolerances from
float32 rounding, and says so) instead of being reported ``check-incomplete``.
"""
import os

import torch
import torch.nn.functional as F
from torch import nn

FIXED = os.environ.get("GRADVIZ_REPORT_FIXED") == "1"
EXPECT = {"code": "unreachable", "params": ["W_phi.weight", "W_theta.weight"], "cause": ["detach"],
          "gradcheck": True}


class AGCN(nn.Module):
    def __init__(self, n_nodes=6, in_dim=8, hid=8, n_class=3):
        super().__init__()
        self.n = n_nodes
        self.W_theta = nn.Linear(in_dim, hid, bias=False)
        self.W_phi = nn.Linear(in_dim, hid, bias=False)
        self.gc1 = nn.Linear(in_dim, hid)
        self.fc = nn.Linear(hid, n_class)

    def gen_adj(self, x):
        adj = torch.softmax(self.W_theta(x) @ self.W_phi(x).transpose(1, 2), dim=-1)
        if not FIXED:
            adj = adj.detach()                                   # BUG
        return torch.stack([self.gen_norm(a + torch.eye(self.n)) for a in adj])

    @staticmethod
    def gen_norm(A):
        D = torch.pow(A.sum(1).float(), -0.5)
        D = torch.diag(D)
        return torch.matmul(torch.matmul(A, D).t(), D)

    def forward(self, x):
        adj = self.gen_adj(x)
        h = torch.tanh(adj @ self.gc1(x))
        return self.fc(h.mean(1))


model = AGCN


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(4, 6, 8, generator=g), torch.randint(3, (4,), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)
